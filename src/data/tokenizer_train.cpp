// Tokenizer training through SentencePieceTrainer with our own SentenceIterator; see tokenizer_train.h.
#include "data/tokenizer_train.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <limits>
#include <regex>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "core/file.h"
#include "core/utf8.h"
#include "data/jsonl_reader.h"
#include "data/tokenizer.h"

namespace llamatrain::data {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool ends_with_any(const std::string& path, std::initializer_list<const char*> suffixes) {
  for (const char* s : suffixes)
    for (const char* c : {"", ".gz", ".zst"})
      if (path.ends_with(std::string(s) + c)) return true;
  return false;
}

// JSONL or text for one file: by extension, else by whether the first non-blank line is a JSON object.
bool file_is_jsonl(const std::string& path, TrainInputFormat format) {
  if (format != TrainInputFormat::kAuto) return format == TrainInputFormat::kJsonl;
  if (ends_with_any(path, {".jsonl", ".json"})) return true;
  if (ends_with_any(path, {".txt"})) return false;
  LineReader r(path);
  std::string_view line;
  while (r.next(&line)) {
    const size_t i = line.find_first_not_of(" \t\r");
    if (i == std::string_view::npos) continue;
    return line[i] == '{';
  }
  return false;
}

// Cuts a document into pieces of at most `max` bytes: at the last line break that fits, else at the
// last UTF-8 character boundary that fits.
void cut_document(std::string_view doc, size_t max, std::deque<std::string>* out) {
  while (doc.size() > max) {
    size_t cut = doc.rfind('\n', max - 1);
    if (cut == std::string_view::npos || cut == 0) {
      cut = max;
      while (cut > 0 && utf8_continuation(static_cast<uint8_t>(doc[cut]))) --cut;
      if (cut == 0) cut = max;
    } else {
      cut += 1;  // the line break stays with the part before it
    }
    out->emplace_back(doc.substr(0, cut));
    doc.remove_prefix(cut);
  }
  if (!doc.empty()) out->emplace_back(doc);
}

// Every document of every file, one at a time, as SentencePiece's trainer pulls them.
class DocumentIterator : public sentencepiece::SentenceIterator {
 public:
  DocumentIterator(const TokenizerTrainOptions& opt, const std::vector<std::string>& files, TokenizerTrainResult* res)
      : opt_(opt), files_(files), res_(res), extractor_(opt.json_keys) {
    Next();
  }
  bool done() const override { return done_; }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }
  void Next() override {
    while (pending_.empty()) {
      if (!fill()) {
        finish_reading();
        done_ = true;
        return;
      }
    }
    value_ = std::move(pending_.front());
    pending_.pop_front();
    ++res_->sentences;
  }

 private:
  void add_document(std::string_view doc) {
    if (doc.empty()) {
      ++res_->skipped_lines;
      return;
    }
    ++res_->documents;
    if (doc.size() > static_cast<size_t>(opt_.max_sentence_length)) ++res_->cut_documents;
    cut_document(doc, static_cast<size_t>(opt_.max_sentence_length), &pending_);
  }
  void report_bytes() {
    const uint64_t now = reader_->bytes_consumed();
    if (opt_.on_read && now > reported_) opt_.on_read(static_cast<int64_t>(now - reported_));
    reported_ = now;
  }
  // Reads lines until one gives a document; false when every file is read.
  bool fill() {
    for (;;) {
      if (!reader_) {
        if (next_file_ >= files_.size()) return false;
        reader_ = std::make_unique<LineReader>(files_[next_file_]);
        jsonl_ = file_is_jsonl(files_[next_file_], opt_.format);
        ++next_file_;
        reported_ = 0;
      }
      std::string_view line;
      if (!reader_->next(&line)) {
        report_bytes();
        if (reader_->byte_order_mark()) res_->byte_order_mark_files.push_back(reader_->path());
        reader_.reset();
        continue;
      }
      if (++lines_ % 256 == 0) report_bytes();
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!jsonl_) {
        if (!is_valid_utf8(line.data(), line.size())) {
          ++res_->skipped_lines;
          continue;
        }
        add_document(line);
        return true;
      }
      padded_.assign(line);
      padded_.append(kJsonPadding, '\0');
      int detail = 0;
      if (extractor_.extract(padded_.data(), line.size(), &values_, &detail) != LineStatus::kOk) {
        ++res_->skipped_lines;
        continue;
      }
      for (auto v : values_) add_document(v);
      return true;
    }
  }
  void finish_reading() {
    if (finished_) return;
    finished_ = true;
    if (opt_.on_read_done) opt_.on_read_done();
  }

  const TokenizerTrainOptions& opt_;
  const std::vector<std::string>& files_;
  TokenizerTrainResult* res_;
  JsonFieldExtractor extractor_;
  std::unique_ptr<LineReader> reader_;
  size_t next_file_ = 0;
  bool jsonl_ = false;
  uint64_t reported_ = 0;
  int64_t lines_ = 0;
  std::string padded_;
  std::vector<std::string_view> values_;
  std::deque<std::string> pending_;
  std::string value_;
  bool done_ = false, finished_ = false;
};

// The library's reason, rephrased with the fix.
[[noreturn]] void training_failed(const TokenizerTrainOptions& opt, const std::string& why) {
  std::smatch m;
  if (std::regex_search(why, m, std::regex("Please set it to a value <= ([0-9]+)")))
    fail("--vocab-size {} is more than this text gives: SentencePiece finds at most {} pieces in it\nhint: pass "
         "--vocab-size {} or less, or train on more text",
         opt.vocab_size, m[1].str(), m[1].str());
  if (std::regex_search(why, m, std::regex("smaller than required_chars\\. [0-9]+ vs ([0-9]+)")))
    fail("--vocab-size {} is too small: the text's characters (at --character-coverage {}) with the special and "
         "byte pieces need {}\nhint: pass --vocab-size {} or more, or lower --character-coverage",
         opt.vocab_size, opt.character_coverage, m[1].str(), m[1].str());
  fail("tokenizer train: SentencePiece's trainer failed: {}\nhint: check the options (--model-type, --vocab-size); "
       "--verbose shows the trainer's log",
       why);
}

}  // namespace

std::vector<std::string> tokenizer_train_files(const TokenizerTrainOptions& opt) {
  std::vector<std::string> files;
  for (const auto& p : opt.inputs) {
    std::vector<std::string> got;
    if (opt.format == TrainInputFormat::kText) {
      got = expand_inputs({p}, InputFormat::kText);
    } else if (opt.format == TrainInputFormat::kJsonl || !std::filesystem::is_directory(p)) {
      got = expand_inputs({p}, InputFormat::kJsonl);
    } else {  // a folder read by content: its JSONL and its text files
      for (auto f : {InputFormat::kJsonl, InputFormat::kText}) {
        try {
          for (auto& x : expand_inputs({p}, f)) got.push_back(x);
        } catch (const Error&) {
        }
      }
      if (got.empty()) got = expand_inputs({p}, InputFormat::kJsonl);  // its error
      std::sort(got.begin(), got.end());
    }
    files.insert(files.end(), got.begin(), got.end());
  }
  return files;
}

std::vector<std::string> read_documents(const TokenizerTrainOptions& opt, int64_t* skipped) {
  TokenizerTrainOptions o = opt;
  o.max_sentence_length = std::numeric_limits<int>::max();
  o.on_read = nullptr;
  o.on_read_done = nullptr;
  TokenizerTrainResult res;
  res.files = tokenizer_train_files(o);
  std::vector<std::string> docs;
  for (DocumentIterator it(o, res.files, &res); !it.done(); it.Next()) docs.push_back(it.value());
  *skipped = res.skipped_lines;
  return docs;
}

TokenizerTrainResult run_tokenizer_train(const TokenizerTrainOptions& opt) {
  if (opt.inputs.empty()) fail("tokenizer train: --input is required\nhint: e.g. --input corpus.jsonl");
  if (opt.output.empty()) fail("tokenizer train: -o OUT.model is required\nhint: e.g. -o tokenizer.model");
  if (opt.vocab_size <= 0) fail("tokenizer train: --vocab-size is required\nhint: e.g. --vocab-size 32000 (Llama 2)");
  check_output_file(opt.output, "-o");  // before the work, not after it
  TokenizerTrainResult res;
  res.files = tokenizer_train_files(opt);
  for (const auto& f : res.files) res.input_bytes += std::filesystem::file_size(f);

  const int threads =
      opt.threads > 0 ? opt.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::unordered_map<std::string, std::string> kwargs = {
      {"model_type", opt.model_type},
      {"vocab_size", std::to_string(opt.vocab_size)},
      {"character_coverage", fmt::format("{}", opt.character_coverage)},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"max_sentence_length", std::to_string(opt.max_sentence_length)},
      {"num_threads", std::to_string(threads)},
      {"input_sentence_size", std::to_string(opt.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"minloglevel", opt.verbose ? "0" : "2"},
  };

  const auto t0 = std::chrono::steady_clock::now();
  auto read_done = t0;
  TokenizerTrainOptions o = opt;
  o.on_read_done = [&] {
    read_done = std::chrono::steady_clock::now();
    res.read_seconds = seconds_since(t0);
    if (res.documents == 0)
      fail("tokenizer train: the input has no documents ({} files, {} lines skipped as blank, malformed or without "
           "the key{} {})\nhint: pass JSONL with the text under --json-keys, or text with one sentence per line",
           res.files.size(), res.skipped_lines, opt.json_keys.size() > 1 ? "s" : "", fmt::join(opt.json_keys, ", "));
    if (opt.on_read_done) opt.on_read_done();
  };
  DocumentIterator it(o, res.files, &res);
  std::string proto;
  const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &proto);
  if (!status.ok()) training_failed(opt, status.ToString());
  res.train_seconds = seconds_since(read_done);

  const Tokenizer check = Tokenizer::from_file_bytes(proto, opt.output);
  res.pieces = check.vocab_size();
  write_file_atomic(opt.output, proto);
  return res;
}

}  // namespace llamatrain::data
