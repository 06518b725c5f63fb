// Preprocessing pipeline (reader thread -> tokenizer workers -> in-order writer); see preprocess.h.
// Memory bound: at most max_in_flight batches (each ~batch_bytes of text plus its tokens) exist at
// once; the reader blocks until the writer has consumed one. Errors in any thread stop all threads
// and are rethrown by run_preprocess; unfinished outputs are removed (only *.tmp ever existed).
#include "data/preprocess.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <system_error>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "core/file.h"
#include "data/tokenizer.h"

namespace llamatrain::data {

namespace {

using Clock = std::chrono::steady_clock;

// One unit of work: consecutive lines of one file.
struct Batch {
  int64_t seq = 0;
  int file = 0;
  int64_t first_line = 0;         // 1-based line number of line 0
  uint64_t consumed_after = 0;    // on-disk input bytes read once this batch was complete
  std::string text;               // every line followed by '\n', then kJsonPadding bytes
  std::vector<size_t> starts{0};  // (n+1,) line i = text[starts[i], starts[i+1] - 1)
  // Filled by a worker:
  std::vector<LineStatus> status;  // (n,)
  std::vector<int32_t> detail;     // (n,) key index or simdjson error code
  std::vector<int32_t> tokens;     // all documents of the batch back to back
  std::vector<size_t> spans;       // (n*K+1,) tokens of (line i, key k) = [spans[i*K+k], spans[i*K+k+1])
  size_t lines() const { return starts.size() - 1; }
};

struct Shared {
  std::mutex mu;
  std::condition_variable cv_work, cv_space, cv_done;
  std::deque<std::unique_ptr<Batch>> work;
  std::map<int64_t, std::unique_ptr<Batch>> done;
  int in_flight = 0;
  int max_in_flight = 4;
  bool reader_done = false;
  int64_t total_batches = 0;
  bool abort = false;
  std::exception_ptr error;
  std::vector<std::string> bom_files;  // the reader's, read after it joined

  void set_error(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = e;
    abort = true;
    cv_work.notify_all();
    cv_space.notify_all();
    cv_done.notify_all();
  }
};

void reader_main(Shared* sh, const std::vector<std::string>* files, const PreprocessOptions* opt) {
  try {
    int64_t seq = 0;
    uint64_t finished_bytes = 0;
    auto push = [&](std::unique_ptr<Batch>& b) -> bool {
      b->text.append(kJsonPadding, '\0');
      b->seq = seq++;
      std::unique_lock<std::mutex> lock(sh->mu);
      sh->cv_space.wait(lock, [&] { return sh->abort || sh->in_flight < sh->max_in_flight; });
      if (sh->abort) return false;
      ++sh->in_flight;
      sh->work.push_back(std::move(b));
      sh->cv_work.notify_one();
      return true;
    };
    for (size_t f = 0; f < files->size(); ++f) {
      LineReader reader((*files)[f]);
      auto batch = std::make_unique<Batch>();
      batch->file = static_cast<int>(f);
      std::string_view line;
      while (reader.next(&line)) {
        if (batch->lines() == 0) batch->first_line = reader.line_number();
        batch->text.append(line);
        batch->text.push_back('\n');
        batch->starts.push_back(batch->text.size());
        if (batch->text.size() >= opt->batch_bytes || static_cast<int>(batch->lines()) >= opt->batch_lines) {
          batch->consumed_after = finished_bytes + reader.bytes_consumed();
          if (!push(batch)) return;
          batch = std::make_unique<Batch>();
          batch->file = static_cast<int>(f);
        }
      }
      finished_bytes += reader.bytes_consumed();
      if (reader.byte_order_mark()) sh->bom_files.push_back((*files)[f]);
      batch->consumed_after = finished_bytes;
      if (batch->lines() > 0 && !push(batch)) return;
    }
    std::lock_guard<std::mutex> lock(sh->mu);
    sh->reader_done = true;
    sh->total_batches = seq;
    sh->cv_work.notify_all();
    sh->cv_done.notify_all();
  } catch (...) {
    sh->set_error(std::current_exception());
  }
}

void tokenize_batch(Batch* b, const Tokenizer& tok, JsonFieldExtractor* ex, const PreprocessOptions& opt,
                    std::vector<std::string_view>* values, std::vector<int>* ids) {
  const size_t n = b->lines(), K = opt.json_keys.size();
  b->status.assign(n, LineStatus::kOk);
  b->detail.assign(n, 0);
  b->tokens.clear();
  b->spans.assign(1, 0);
  b->spans.reserve(n * K + 1);
  const int bos = tok.bos_id(), eos = tok.eos_id();
  for (size_t i = 0; i < n; ++i) {
    const char* data = b->text.data() + b->starts[i];
    size_t len = b->starts[i + 1] - 1 - b->starts[i];
    LineStatus st;
    int detail = 0;
    if (opt.input_format == InputFormat::kJsonl) {
      st = ex->extract(data, len, values, &detail);
    } else {
      if (len > 0 && data[len - 1] == '\r') --len;
      st = is_valid_utf8(data, len) ? LineStatus::kOk : LineStatus::kInvalidUtf8;
      values->assign(1, std::string_view(data, len));
    }
    b->status[i] = st;
    b->detail[i] = detail;
    for (size_t k = 0; k < K; ++k) {
      if (st == LineStatus::kOk) {
        tok.encode((*values)[k], ids);
        if (!ids->empty()) {  // empty documents are skipped (NeMo): no BOS/EOD either
          if (opt.bos) b->tokens.push_back(bos);
          b->tokens.insert(b->tokens.end(), ids->begin(), ids->end());
          if (opt.append_eod) b->tokens.push_back(eos);
        }
      }
      b->spans.push_back(b->tokens.size());
    }
  }
}

void worker_main(Shared* sh, const Tokenizer* tok, const PreprocessOptions* opt) {
  try {
    JsonFieldExtractor ex(opt->json_keys);
    std::vector<std::string_view> values;
    std::vector<int> ids;
    while (true) {
      std::unique_ptr<Batch> b;
      {
        std::unique_lock<std::mutex> lock(sh->mu);
        sh->cv_work.wait(lock, [&] { return sh->abort || !sh->work.empty() || sh->reader_done; });
        if (sh->abort) return;
        if (sh->work.empty()) return;  // reader_done and nothing left
        b = std::move(sh->work.front());
        sh->work.pop_front();
      }
      tokenize_batch(b.get(), *tok, &ex, *opt, &values, &ids);
      std::lock_guard<std::mutex> lock(sh->mu);
      const int64_t seq = b->seq;
      sh->done.emplace(seq, std::move(b));
      sh->cv_done.notify_all();
    }
  } catch (...) {
    sh->set_error(std::current_exception());
  }
}

// Stops and joins every thread when the writer leaves, normally or by exception.
struct ThreadGuard {
  Shared* sh;
  std::vector<std::thread> threads;
  ~ThreadGuard() {
    {
      std::lock_guard<std::mutex> lock(sh->mu);
      sh->abort = true;
      sh->cv_work.notify_all();
      sh->cv_space.notify_all();
      sh->cv_done.notify_all();
    }
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
};

std::string human(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string hms(double s) {
  int64_t t = static_cast<int64_t>(s + 0.5);
  return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
}

// What the writer saw of the input, to explain an empty output.
struct InputSample {
  std::string first_line;                // the first non-blank line, cut to 80 bytes
  std::vector<std::string> object_keys;  // keys of the first object that lacked a --json-keys key
  bool keys_known = false;
};

// Every --json-keys key must give at least one document, and a JSON array (one object per element,
// possibly pretty-printed so that a few lines parse on their own) is not JSONL; otherwise say what
// the input held.
void check_output_plausible(const PreprocessStats& st, const PreprocessOptions& opt, const InputSample& seen) {
  const bool text = opt.input_format == InputFormat::kText;
  const int64_t not_objects =
      st.skipped[static_cast<int>(LineStatus::kInvalidJson)] + st.skipped[static_cast<int>(LineStatus::kNotObject)];
  const bool array = !text && !seen.first_line.empty() && seen.first_line[0] == '[' && 2 * not_objects > st.lines;
  const PreprocessStats::Output* empty = nullptr;
  for (const auto& o : st.outputs)
    if (o.documents == 0 && !empty) empty = &o;
  if (!empty && !array) return;
  std::string files = st.files.size() == 1 ? st.files[0] : fmt::format("{} files", st.files.size());
  std::string head = !empty ? fmt::format("preprocess: {}", files)
                     : text ? fmt::format("preprocess: no document in {}", files)
                            : fmt::format("preprocess: no document for --json-keys {} in {}", empty->key, files);
  if (st.lines == 0) fail("{}: the input is empty (0 lines)\nhint: check the --input path(s)", head);
  std::string counts;
  LineStatus top = LineStatus::kOk;
  for (int r = 1; r < kNumLineStatus; ++r) {
    if (st.skipped[r] == 0) continue;
    counts += fmt::format("\n  skipped {} line(s) as {} (first at {})", st.skipped[r],
                          line_status_name(static_cast<LineStatus>(r)), fmt::join(st.locations[r], ", "));
    if (top == LineStatus::kOk || st.skipped[r] > st.skipped[static_cast<int>(top)]) top = static_cast<LineStatus>(r);
  }
  std::string why, hint;
  if (array) {
    why = "this is a JSON array (the first line starts with '['), expected JSONL: one object per line";
    hint = "convert it to one object per line, e.g. jq -c '.[]' FILE.json > FILE.jsonl";
  } else if (!text && top == LineStatus::kInvalidJson) {
    why = fmt::format("the lines are not JSON (the first reads {})",
                      nlohmann::json(seen.first_line).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    hint = "is this plain text? use --input-format text (one document per line)";
  } else if (!text && top == LineStatus::kMissingKey) {
    why = seen.object_keys.empty()
              ? fmt::format("the objects have no key \"{}\"", empty->key)
              : fmt::format("the objects have keys: {}; not \"{}\"", fmt::join(seen.object_keys, ", "), empty->key);
    hint = seen.object_keys.empty() ? "check --json-keys"
                                    : fmt::format("use --json-keys with one of: {}", fmt::join(seen.object_keys, " "));
  } else if (!text && top == LineStatus::kNonString) {
    why = fmt::format("the values of key \"{}\" are not strings", empty->key);
    hint = "--json-keys must name string fields holding the text";
  } else if (!text && top == LineStatus::kNotObject) {
    why = "the lines are JSON but not objects";
    hint = "each line must be an object such as {\"text\": \"...\"}";
  } else if (top == LineStatus::kInvalidUtf8) {
    why = "the lines are not valid UTF-8";
    hint = "convert the input to UTF-8 (e.g. iconv -f latin1 -t utf-8)";
  } else if (top == LineStatus::kBlankLine) {
    why = "every line is blank";
    hint = "check the --input path(s)";
  } else {
    why = text ? "every line is empty" : fmt::format("every value of key \"{}\" is empty", empty->key);
    hint = "check the input";
  }
  fail("{}: {}, so nothing was written{}\nhint: {}", head, why, counts, hint);
}

// The options that can be judged before reading anything.
void check_options(const PreprocessOptions& opt) {
  if (opt.workers < 1 || opt.workers > kMaxWorkers)
    fail("--workers: got {}, expected an integer from 1 to {}", opt.workers, kMaxWorkers);
  if (opt.json_keys.empty()) fail("--json-keys is empty, expected at least one key (e.g. text)");
  if (opt.output_prefix.empty()) fail("--output-prefix is empty\nhint: e.g. --output-prefix data/corpus");
  if (is_directory(opt.output_prefix))
    fail("--output-prefix {} is a folder, expected a path prefix inside one\nhint: e.g. --output-prefix {}/corpus "
         "(writes corpus_text_document.bin/.idx there)",
         opt.output_prefix,
         opt.output_prefix.ends_with("/") ? opt.output_prefix.substr(0, opt.output_prefix.size() - 1)
                                          : opt.output_prefix);
  check_output_file(opt.output_prefix + ".stats.json", "--output-prefix");
  if (opt.input_format == InputFormat::kText && (opt.json_keys.size() != 1 || opt.json_keys[0] != "text"))
    fail("--input-format text reads one document per line under the key \"text\", got --json-keys {}\n"
         "hint: drop --json-keys with --input-format text",
         fmt::join(opt.json_keys, " "));
}

uint64_t total_size(const std::vector<std::string>& files) {
  uint64_t total = 0;
  for (const auto& f : files) {
    std::error_code ec;
    auto sz = std::filesystem::file_size(f, ec);
    if (!ec) total += sz;
  }
  return total;
}

// One tokenizer per worker (loaded here so a bad model fails before any thread starts; the workers
// share one tokenizer.json), checked against --append-eod and --bos.
std::vector<Tokenizer> load_tokenizers(const PreprocessOptions& opt) {
  std::vector<Tokenizer> tokenizers;
  tokenizers.reserve(opt.workers);
  tokenizers.emplace_back(opt.tokenizer_model, opt.tokenizer_library);
  for (int w = 1; w < opt.workers; ++w) {
    if (tokenizers[0].is_huggingface())
      tokenizers.push_back(tokenizers[0].share());  // one copy of its tables
    else
      tokenizers.emplace_back(opt.tokenizer_model, opt.tokenizer_library);
  }
  const Tokenizer& tok = tokenizers[0];
  if (opt.append_eod && tok.eos_id() < 0)
    fail("--append-eod: tokenizer {} has no eos id, expected one (Llama 2: 2)\nhint: a tokenizer.json takes its eos "
         "from "
         "tokenizer_config.json's eos_token: put that file beside it",
         tok.path());
  if (opt.bos && tok.bos_id() < 0)
    fail("--bos: tokenizer {} has no bos id, expected one (Llama 2: 1)\nhint: drop --bos for a model without BOS "
         "(Qwen2.5)",
         tok.path());
  return tokenizers;
}

// One output per --json-keys key: its stats entry and its writer.
std::vector<std::unique_ptr<IndexedDatasetWriter>> open_outputs(const PreprocessOptions& opt, PreprocessStats* st) {
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const auto& key : opt.json_keys) {
    PreprocessStats::Output o;
    o.key = key;
    o.prefix = key_prefix(opt.output_prefix, key);
    o.min_tokens = std::numeric_limits<int64_t>::max();
    st->outputs.push_back(o);
    writers.push_back(std::make_unique<IndexedDatasetWriter>(o.prefix, st->dtype));
  }
  return writers;
}

void start_threads(ThreadGuard* guard, const std::vector<std::string>* files, const std::vector<Tokenizer>& tokenizers,
                   const PreprocessOptions& opt) {
  try {
    guard->threads.emplace_back(reader_main, guard->sh, files, &opt);
    for (int w = 0; w < opt.workers; ++w) guard->threads.emplace_back(worker_main, guard->sh, &tokenizers[w], &opt);
  } catch (const std::system_error& e) {
    fail("cannot start {} threads: {}\nhint: lower --workers", opt.workers + 1, e.what());
  }
}

// Waits (up to 250 ms) for the batch numbered `next`: true with *b set when it is done, true with *b
// null when it is not yet, false once every batch has been taken. Rethrows a thread's error.
bool take_batch(Shared* sh, int64_t next, std::unique_ptr<Batch>* b) {
  std::unique_lock<std::mutex> lock(sh->mu);
  sh->cv_done.wait_for(lock, std::chrono::milliseconds(250), [&] {
    return sh->error || sh->done.count(next) || (sh->reader_done && next == sh->total_batches);
  });
  if (sh->error) std::rethrow_exception(sh->error);
  auto it = sh->done.find(next);
  if (it != sh->done.end()) {
    *b = std::move(it->second);
    sh->done.erase(it);
    --sh->in_flight;
    sh->cv_space.notify_one();
    return true;
  }
  return !(sh->reader_done && next == sh->total_batches);
}

// The writer's side of the pipeline: the batches, in sequence order, into the outputs and the stats.
// Skips are recorded here, in input order, so counts, locations and --strict are deterministic.
class BatchWriter {
 public:
  BatchWriter(const PreprocessOptions& opt, bool tty, PreprocessStats* st,
              std::vector<std::unique_ptr<IndexedDatasetWriter>>* writers)
      : opt_(opt), tty_(tty), st_(*st), writers_(*writers), describer_(opt.json_keys) {}

  void write(const Batch& b) {
    st_.text_bytes += b.text.size() - kJsonPadding;
    st_.lines += static_cast<int64_t>(b.lines());
    note_first_line(b);
    const size_t K = opt_.json_keys.size();
    for (size_t i = 0; i < b.lines(); ++i) {
      if (b.status[i] != LineStatus::kOk) {
        record_skip(b.status[i], b.detail[i], b, i);
        continue;
      }
      for (size_t k = 0; k < K; ++k) {
        const size_t lo = b.spans[i * K + k], hi = b.spans[i * K + k + 1];
        if (lo == hi)
          record_skip(LineStatus::kEmptyDocument, static_cast<int>(k), b, i);
        else
          add_document(k, std::span<const int32_t>(b.tokens.data() + lo, hi - lo));
      }
    }
  }
  const InputSample& seen() const { return seen_; }

 private:
  void note_first_line(const Batch& b) {
    for (size_t i = 0; i < b.lines() && seen_.first_line.empty(); ++i) {
      std::string_view line(b.text.data() + b.starts[i], b.starts[i + 1] - 1 - b.starts[i]);
      const size_t start = line.find_first_not_of(" \t\r");
      if (start != std::string_view::npos) seen_.first_line = std::string(line.substr(start, 80));
    }
  }

  void add_document(size_t k, std::span<const int32_t> tokens) {
    writers_[k]->add_document(tokens);
    auto& o = st_.outputs[k];
    const int64_t n = static_cast<int64_t>(tokens.size());
    ++o.documents;
    o.tokens += n;
    o.min_tokens = std::min(o.min_tokens, n);
    o.max_tokens = std::max(o.max_tokens, n);
  }

  void record_skip(LineStatus s, int detail, const Batch& b, size_t i) {
    const int r = static_cast<int>(s);
    if (s == LineStatus::kMissingKey && !seen_.keys_known) {
      seen_.object_keys = describer_.object_keys(b.text.data() + b.starts[i], b.starts[i + 1] - 1 - b.starts[i]);
      seen_.keys_known = true;
    }
    const std::string where = fmt::format("{}:{}", st_.files[b.file], b.first_line + static_cast<int64_t>(i));
    const std::string what = opt_.input_format == InputFormat::kText && s == LineStatus::kEmptyDocument
                                 ? "empty line (empty document)"
                                 : describer_.describe(s, detail);
    if (opt_.strict && s != LineStatus::kBlankLine)
      fail("{}: {}\nhint: fix or remove the line, or run without --strict to skip such lines (they are counted "
           "in {}.stats.json)",
           where, what, opt_.output_prefix);
    ++st_.skipped[r];
    if (static_cast<int>(st_.locations[r].size()) < kMaxSkipLocations) {
      st_.locations[r].push_back(where);
      if (opt_.progress != ProgressMode::kOff)
        std::fprintf(stderr, "%swarning: %s: skipped: %s\n", tty_ ? "\r\033[K" : "", where.c_str(), what.c_str());
    }
  }

  const PreprocessOptions& opt_;
  const bool tty_;
  PreprocessStats& st_;
  std::vector<std::unique_ptr<IndexedDatasetWriter>>& writers_;
  JsonFieldExtractor describer_;
  InputSample seen_;
};

// The progress line on stderr: rewritten in place every 0.5 s on a terminal, a line every 5 s otherwise.
class ProgressLine {
 public:
  ProgressLine(const PreprocessOptions& opt, bool tty, Clock::time_point t0)
      : opt_(opt), tty_(tty), t0_(t0), last_(t0) {}

  // written_bytes: the on-disk input bytes behind the batches written so far.
  void show(const PreprocessStats& st, uint64_t written_bytes, bool final_line) {
    if (opt_.progress == ProgressMode::kOff) return;
    auto now = Clock::now();
    double since = std::chrono::duration<double>(now - last_).count();
    if (!final_line && since < (tty_ ? 0.5 : 5.0)) return;
    if (final_line && !tty_) return;
    last_ = now;
    double el = std::max(1e-9, std::chrono::duration<double>(now - t0_).count());
    int64_t docs = 0, tokens = 0;
    for (const auto& o : st.outputs) docs += o.documents, tokens += o.tokens;
    std::string pct;
    if (st.input_bytes > 0) {
      double f = std::min(1.0, static_cast<double>(written_bytes) / static_cast<double>(st.input_bytes));
      pct = fmt::format("{:5.1f}% ", 100.0 * f);
      if (f > 0.001 && f < 1.0) pct += fmt::format("ETA {} ", hms(el * (1 - f) / f));
    }
    std::string line = fmt::format("preprocess: {}{} docs ({}/s), {:.1f} MB/s, {} tokens, {}", pct, human(docs),
                                   human(docs / el), st.text_bytes / el / 1e6, human(tokens), hms(el));
    if (tty_)
      std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
    else
      std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }

 private:
  const PreprocessOptions& opt_;
  const bool tty_;
  const Clock::time_point t0_;
  Clock::time_point last_;
};

}  // namespace

std::string key_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_document";
}

PreprocessStats run_preprocess(const PreprocessOptions& opt) {
  const auto t0 = Clock::now();
  check_options(opt);
  PreprocessStats st;
  st.workers = opt.workers;
  st.files = expand_inputs(opt.inputs, opt.input_format);
  st.input_bytes = total_size(st.files);
  const std::vector<Tokenizer> tokenizers = load_tokenizers(opt);
  st.vocab_size = tokenizers[0].vocab_size() + ((opt.need_pad_id && tokenizers[0].pad_id() < 0) ? 1 : 0);
  st.dtype = dtype_for_vocab(st.vocab_size);
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers = open_outputs(opt, &st);

  // Reader and workers run in threads; this one writes, strictly in sequence order.
  Shared sh;
  sh.max_in_flight = 2 * opt.workers + 2;
  ThreadGuard guard{&sh, {}};
  start_threads(&guard, &st.files, tokenizers, opt);
  const bool tty = ::isatty(2);
  BatchWriter writer(opt, tty, &st, &writers);
  ProgressLine progress(opt, tty, t0);
  uint64_t written_bytes = 0;
  std::unique_ptr<Batch> b;
  for (int64_t next = 0; take_batch(&sh, next, &b);) {
    if (b) {
      ++next;
      written_bytes = b->consumed_after;
      writer.write(*b);
      b.reset();
    }
    progress.show(st, written_bytes, false);
  }
  progress.show(st, written_bytes, true);
  for (auto& t : guard.threads) t.join();
  st.byte_order_mark_files = sh.bom_files;

  check_output_plausible(st, opt, writer.seen());
  for (auto& w : writers) w->finish();
  st.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  write_file_atomic(opt.output_prefix + ".stats.json", stats_json(st, opt));
  return st;
}

std::string stats_json(const PreprocessStats& st, const PreprocessOptions& opt) {
  using nlohmann::json;
  json j;
  j["format"] = "llamatrain-preprocess-stats";
  j["version"] = 1;
  j["inputs"] = st.files;
  j["input_bytes"] = st.input_bytes;
  j["text_bytes"] = st.text_bytes;
  j["lines"] = st.lines;
  j["tokenizer_model"] = opt.tokenizer_model;
  j["vocab_size"] = st.vocab_size;
  j["dtype"] = dtype_name(st.dtype);
  j["conventions"] = {{"bos", opt.bos},
                      {"append_eod", opt.append_eod},
                      {"need_pad_id", opt.need_pad_id},
                      {"empty_documents", "skipped"},
                      {"input_format", opt.input_format == InputFormat::kText ? "text" : "jsonl"}};
  int64_t docs = 0, tokens = 0, mn = std::numeric_limits<int64_t>::max(), mx = 0;
  json outs = json::object();
  for (const auto& o : st.outputs) {
    outs[o.key] = {{"prefix", o.prefix},
                   {"documents", o.documents},
                   {"tokens", o.tokens},
                   {"tokens_per_document",
                    {{"min", o.min_tokens},
                     {"mean", o.documents ? static_cast<double>(o.tokens) / o.documents : 0.0},
                     {"max", o.max_tokens}}}};
    docs += o.documents;
    tokens += o.tokens;
    if (o.documents) mn = std::min(mn, o.min_tokens), mx = std::max(mx, o.max_tokens);
  }
  j["outputs"] = outs;
  j["documents"] = docs;
  j["tokens"] = tokens;
  j["tokens_per_document"] = {
      {"min", docs ? mn : 0}, {"mean", docs ? static_cast<double>(tokens) / docs : 0.0}, {"max", mx}};
  json skipped = json::object();
  int64_t total = 0;
  for (int r = 1; r < kNumLineStatus; ++r) {
    if (st.skipped[r] == 0) continue;
    skipped[line_status_name(static_cast<LineStatus>(r))] = {{"count", st.skipped[r]}, {"first", st.locations[r]}};
    total += st.skipped[r];
  }
  j["skipped"] = skipped;
  j["skipped_total"] = total;
  j["byte_order_mark_files"] = st.byte_order_mark_files;
  j["elapsed_s"] = st.elapsed_s;
  j["workers"] = st.workers;
  // File names need not be UTF-8 on Linux; JSON text must be (bytes that are not show as U+FFFD).
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string format_summary(const PreprocessStats& st, const PreprocessOptions& opt) {
  int64_t docs = 0, tokens = 0;
  for (const auto& o : st.outputs) docs += o.documents, tokens += o.tokens;
  const double el = std::max(st.elapsed_s, 1e-9);
  std::string s = fmt::format(
      "preprocess: {} file(s), {} lines, {:.1f} MB of text in {:.2f} s with {} worker(s) ({:.1f} MB/s, {} docs/s)\n",
      st.files.size(), st.lines, st.text_bytes / 1e6, st.elapsed_s, st.workers, st.text_bytes / el / 1e6,
      human(docs / el));
  for (const auto& o : st.outputs)
    s += fmt::format("  {}.bin/.idx: {}, {} documents, {} tokens, tokens/doc min {} mean {:.1f} max {}\n", o.prefix,
                     dtype_name(st.dtype), o.documents, o.tokens, o.min_tokens,
                     o.documents ? static_cast<double>(o.tokens) / o.documents : 0.0, o.max_tokens);
  int64_t total = 0;
  for (int r = 1; r < kNumLineStatus; ++r) total += st.skipped[r];
  if (total == 0) {
    s += "  skipped: none\n";
  } else {
    s += fmt::format("  skipped {}:\n", total);
    for (int r = 1; r < kNumLineStatus; ++r) {
      if (st.skipped[r] == 0) continue;
      s += fmt::format("    {:<15} {:>8}  first at {}{}\n", line_status_name(static_cast<LineStatus>(r)), st.skipped[r],
                       fmt::join(st.locations[r], ", "),
                       st.skipped[r] > static_cast<int64_t>(st.locations[r].size()) ? ", ..." : "");
    }
  }
  if (!st.byte_order_mark_files.empty())
    s += fmt::format("  note: {} file(s) began with a UTF-8 byte-order mark, not read as text: {}\n",
                     st.byte_order_mark_files.size(), fmt::join(st.byte_order_mark_files, ", "));
  s += fmt::format("  conventions: bos={} append_eod={} (eos) need_pad_id={} vocab={} dtype={}\n",
                   opt.bos ? "yes" : "no", opt.append_eod ? "yes" : "no", opt.need_pad_id ? "yes" : "no", st.vocab_size,
                   dtype_name(st.dtype));
  s += fmt::format("  stats: {}.stats.json\n", opt.output_prefix);
  (void)tokens;
  return s;
}

}  // namespace llamatrain::data
