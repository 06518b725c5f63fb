// SFT examples and samples; see sft.h.
#include "data/sft.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::data {

namespace {

// Text of a scalar JSON value for templates and completion maps; false for objects/arrays/null.
bool scalar_text(const nlohmann::json& v, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (v.is_number() || v.is_boolean()) {
    *out = v.dump();
    return true;
  }
  return false;
}

}  // namespace

void validate_prompt_template(std::string_view t) {
  for (size_t i = 0; i < t.size(); i++) {
    if (t[i] == '{') {
      if (i + 1 < t.size() && t[i + 1] == '{') {
        i++;
        continue;
      }
      size_t close = t.find('}', i + 1);
      if (close == std::string_view::npos || close == i + 1 ||
          t.substr(i + 1, close - i - 1).find('{') != std::string_view::npos)
        fail("prompt template: unmatched or empty '{{' at character {}, got \"{}\"\nhint: write fields as "
             "{{question}} and a literal brace as {{{{",
             i, t);
      i = close;
    } else if (t[i] == '}') {
      if (i + 1 < t.size() && t[i + 1] == '}') {
        i++;
        continue;
      }
      fail("prompt template: stray '}}' at character {}, got \"{}\"\nhint: a literal brace is written }}}}", i, t);
    }
  }
}

bool sft_row_text(std::string_view line, const SftConfig& cfg, std::string* prompt, std::string* completion,
                  std::string* why) {
  auto bad = [why](std::string reason) {
    *why = std::move(reason);
    return false;
  };
  auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (row.is_discarded()) return bad("invalid JSON");
  if (!row.is_object()) return bad("not a JSON object");

  // Prompt: the template with fields filled in, or the prompt field itself.
  prompt->clear();
  if (cfg.prompt_template.empty()) {
    auto it = row.find(cfg.prompt_key);
    if (it == row.end()) return bad(fmt::format("missing key \"{}\"", cfg.prompt_key));
    if (!it->is_string()) return bad(fmt::format("\"{}\" is not a string", cfg.prompt_key));
    *prompt = it->get<std::string>();
  } else {
    const std::string& t = cfg.prompt_template;
    for (size_t i = 0; i < t.size(); i++) {
      if ((t[i] == '{' || t[i] == '}') && i + 1 < t.size() && t[i + 1] == t[i]) {
        prompt->push_back(t[i++]);
      } else if (t[i] == '{') {
        size_t close = t.find('}', i + 1);
        if (close == std::string::npos) return bad("prompt template has an unclosed '{'");
        std::string name = t.substr(i + 1, close - i - 1);
        auto it = row.find(name);
        if (it == row.end()) return bad(fmt::format("missing key \"{}\"", name));
        std::string v;
        if (!scalar_text(*it, &v)) return bad(fmt::format("\"{}\" is not a string or number", name));
        *prompt += v;
        i = close;
      } else {
        prompt->push_back(t[i]);
      }
    }
  }

  // Completion: the field, mapped through completion_map when one is given.
  auto it = row.find(cfg.completion_key);
  if (it == row.end()) return bad(fmt::format("missing key \"{}\"", cfg.completion_key));
  if (cfg.completion_map.empty()) {
    if (!it->is_string()) return bad(fmt::format("\"{}\" is not a string", cfg.completion_key));
    *completion = it->get<std::string>();
  } else {
    std::string v;
    if (!scalar_text(*it, &v)) return bad(fmt::format("\"{}\" is not a string or number", cfg.completion_key));
    auto m = cfg.completion_map.find(v);
    if (m == cfg.completion_map.end())
      return bad(fmt::format("\"{}\" value not in the completion map", cfg.completion_key));
    *completion = m->second;
  }
  return true;
}

SftExample tokenize_sft_example(const std::string& prompt, const std::string& completion, const Tokenizer& tok,
                                const SftConfig& cfg, bool* truncated) {
  std::vector<int> p = tok.encode(prompt), c = tok.encode(completion);
  const int64_t cap = cfg.seq_length + 1;  // L inputs need L + 1 text ids
  const int64_t bos = cfg.add_bos ? 1 : 0, eos = cfg.add_eos ? 1 : 0;
  *truncated = false;
  if (bos + int64_t(p.size()) + int64_t(c.size()) + eos > cap) {
    *truncated = true;
    // Cut the prompt first (keep its beginning, or its end with truncate_prompt_left), then the
    // completion's end if the completion alone does not fit.
    int64_t keep_p = std::max<int64_t>(0, cap - bos - int64_t(c.size()) - eos);
    if (int64_t(p.size()) > keep_p) {
      if (cfg.truncate_prompt_left)
        p.erase(p.begin(), p.end() - keep_p);
      else
        p.resize(size_t(keep_p));
    }
    int64_t keep_c = std::max<int64_t>(0, cap - bos - int64_t(p.size()) - eos);
    if (int64_t(c.size()) > keep_c) c.resize(size_t(keep_c));
  }
  SftExample ex;
  if (bos) ex.text.push_back(tok.bos_id());
  ex.text.insert(ex.text.end(), p.begin(), p.end());
  ex.prompt_len = int64_t(ex.text.size());
  ex.text.insert(ex.text.end(), c.begin(), c.end());
  if (eos) ex.text.push_back(tok.eos_id());
  return ex;
}

bool chat_sft_example(std::string_view line, const Tokenizer& tok, const SftConfig& cfg, SftExample* ex,
                      bool* truncated, std::string* why) {
  CHECK(cfg.chat.has_value(), "chat_sft_example without a chat template");
  ChatRow row;
  std::vector<ChatSegment> segments;
  if (!chat_row(line, &row, why) || !render_chat(*cfg.chat, row, false, &segments, why)) return false;
  std::vector<int> ids;
  encode_chat(segments, tok, &ids, &ex->loss);
  ex->text.assign(ids.begin(), ids.end());
  // Truncation keeps the beginning: the first turns, their context intact.
  const size_t cap = size_t(cfg.seq_length + 1);
  *truncated = ex->text.size() > cap;
  if (*truncated) {
    ex->text.resize(cap);
    ex->loss.resize(cap);
  }
  // The first id is never predicted (nothing precedes it): an in-loss id must come after it.
  size_t first = 1;
  while (first < ex->loss.size() && !ex->loss[first]) first++;
  if (first >= ex->loss.size()) {
    *why = *truncated ? "no assistant token within seq_length" : "no assistant token (empty assistant turns?)";
    return false;
  }
  ex->prompt_len = int64_t(first);
  return true;
}

std::vector<SftExample> load_sft_jsonl(const std::string& path, const Tokenizer& tok, const SftConfig& cfg,
                                       SftStats* stats) {
  if (cfg.seq_length < 2) fail("SFT seq_length {}: expected >= 2", cfg.seq_length);
  if (!cfg.chat && !cfg.prompt_template.empty()) validate_prompt_template(cfg.prompt_template);
  if (cfg.chat) check_chat_tokens(*cfg.chat, tok);
  if (!is_regular_file(path))
    fail("SFT data {}: {}, expected a JSONL file\nhint: check model.data.train_ds.file_names", path,
         is_directory(path) ? "is a folder" : "not found");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("SFT data {}: cannot open it: {}\nhint: check model.data.train_ds.file_names", path, std::strerror(errno));
  std::vector<SftExample> out;
  std::string line, prompt, completion, why;
  int64_t lineno = 0;
  auto reject = [&](const std::string& reason) {
    stats->malformed++;
    stats->reasons[reason]++;
    if (int(stats->locations.size()) < cfg.max_reported)
      stats->locations.push_back(fmt::format("{}:{}: {}", path, lineno, reason));
  };
  while (std::getline(in, line)) {
    lineno++;
    stats->lines++;
    if (lineno == 1 && line.starts_with("\xEF\xBB\xBF")) {  // as data::LineReader: a BOM is no text
      line.erase(0, 3);
      stats->byte_order_mark = true;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      stats->blank++;
      continue;
    }
    if (cfg.chat) {
      SftExample ex;
      bool truncated = false;
      if (!chat_sft_example(line, tok, cfg, &ex, &truncated, &why)) {
        reject(why);
        continue;
      }
      stats->truncated += truncated;
      stats->examples++;
      out.push_back(std::move(ex));
      continue;
    }
    if (!sft_row_text(line, cfg, &prompt, &completion, &why)) {
      reject(why);
      continue;
    }
    bool truncated = false;
    SftExample ex = tokenize_sft_example(prompt, completion, tok, cfg, &truncated);
    int64_t completion_ids = int64_t(ex.text.size()) - ex.prompt_len - (cfg.add_eos ? 1 : 0);
    if (completion_ids <= 0) {
      reject(completion.empty() ? "empty completion" : "completion does not fit seq_length");
      continue;
    }
    stats->truncated += truncated;
    stats->examples++;
    out.push_back(std::move(ex));
  }
  if (in.bad()) fail("SFT data {}: reading failed after line {}: {}", path, lineno, std::strerror(errno));
  return out;
}

std::string format_sft_stats(const SftStats& s) {
  std::string r = fmt::format("{} examples from {} lines; {} malformed, {} truncated, {} blank", s.examples, s.lines,
                              s.malformed, s.truncated, s.blank);
  for (const auto& [k, v] : s.reasons) r += fmt::format("; {}: {}", k, v);
  if (s.byte_order_mark) r += "; began with a UTF-8 byte-order mark, not read as text";
  for (const auto& l : s.locations) r += "\n  " + l;
  return r;
}

std::vector<std::vector<int64_t>> pack_sft_examples(const std::vector<SftExample>& examples, int64_t capacity,
                                                    uint32_t seed, bool shuffle, int64_t window) {
  CHECK(window >= 1, "packing window {}", window);
  const int64_t n = int64_t(examples.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle && n > 1) NumpyRandomState(seed).shuffle(order.data(), n);
  auto length = [&](int64_t e) { return int64_t(examples[size_t(e)].text.size()); };
  std::vector<std::vector<int64_t>> groups;
  for (int64_t w0 = 0; w0 < n; w0 += window) {
    std::vector<int64_t> win(order.begin() + w0, order.begin() + std::min(n, w0 + window));
    std::stable_sort(win.begin(), win.end(), [&](int64_t a, int64_t b) { return length(a) > length(b); });
    const size_t first = groups.size();
    std::vector<int64_t> used;  // of the window's groups
    for (int64_t e : win) {
      const int64_t len = length(e);
      CHECK(len <= capacity, "example {} has {} ids, capacity {}", e, len, capacity);
      size_t g = 0;
      while (g < used.size() && used[g] + len > capacity) g++;
      if (g == used.size()) {
        groups.emplace_back();
        used.push_back(0);
      }
      groups[first + g].push_back(e);
      used[g] += len;
    }
  }
  return groups;
}

void make_sft_sample(GptSample* out, const std::vector<const SftExample*>& group, const SftConfig& cfg) {
  const int64_t L = cfg.seq_length;
  // Concatenated text (up to L + 1 ids) with, per id, whether it is a completion/EOS id and the
  // position within its example.
  std::vector<int32_t> text;
  std::vector<uint8_t> target;
  std::vector<int32_t> pos;
  for (const SftExample* ex : group) {
    for (int64_t k = 0; k < int64_t(ex->text.size()); k++) {
      text.push_back(ex->text[size_t(k)]);
      target.push_back(ex->loss.empty() ? k >= ex->prompt_len : ex->loss[size_t(k)] != 0);
      pos.push_back(int32_t(k));
    }
  }
  CHECK(int64_t(text.size()) <= L + 1, "SFT group has {} ids, expected <= {}", text.size(), L + 1);
  out->tokens.assign(size_t(L), cfg.pad_id);
  out->labels.assign(size_t(L), kIgnoreLabel);
  out->loss_mask.assign(size_t(L), 0.0f);
  out->position_ids.resize(size_t(L));
  out->doc_start.resize(size_t(L));
  // Where each example starts in the sample; padding (inputs from n on) is one more document.
  std::vector<int32_t> starts;
  {
    int64_t at = 0;
    for (const SftExample* ex : group) {
      starts.push_back(int32_t(at));
      at += int64_t(ex->text.size());
    }
  }
  const int64_t n = int64_t(text.size());
  out->real = std::min(n, L);
  size_t doc = 0;
  for (int64_t t = 0; t < L; t++) {
    if (t < n) out->tokens[size_t(t)] = text[size_t(t)];
    if (t + 1 < n) {
      out->labels[size_t(t)] = text[size_t(t + 1)];
      // The label belongs to the next id's example: a completion id there (never the next
      // example's BOS/prompt) is a training target.
      out->loss_mask[size_t(t)] = target[size_t(t + 1)] ? 1.0f : 0.0f;
    }
    // Padding continues counting from the last real position (its value is never used).
    out->position_ids[size_t(t)] = t < n ? pos[size_t(t)] : (n > 0 ? pos[size_t(n - 1)] : 0) + int32_t(t - n + 1);
    while (doc + 1 < starts.size() && starts[doc + 1] <= t) doc++;
    out->doc_start[size_t(t)] = t < n ? starts.empty() ? 0 : starts[doc] : int32_t(std::min(n, L));
  }
}

SftDataset::SftDataset(std::vector<SftExample> examples, SftConfig cfg, uint32_t seed, bool shuffle)
    : examples_(std::move(examples)), cfg_(std::move(cfg)), seed_(seed), shuffle_(shuffle) {
  if (cfg_.pack) {
    groups_ = pack_sft_examples(examples_, cfg_.seq_length + 1, seed_, shuffle_);
  } else {
    for (int64_t i = 0; i < int64_t(examples_.size()); i++) groups_.push_back({i});
  }
  if (groups_.empty()) fail("SFT dataset has no usable examples\nhint: check the field names and the file");
}

std::string SftDataset::describe_packing() const {
  int64_t inputs = 0;  // inputs that hold an example's id: all of a group's ids but the very last
  for (const auto& g : groups_) {
    int64_t ids = 0;
    for (int64_t e : g) ids += int64_t(examples_[size_t(e)].text.size());
    inputs += std::min(ids, cfg_.seq_length);
  }
  const double slots = double(size()) * double(cfg_.seq_length);
  return fmt::format("packed {} examples into {} samples of {} tokens, {:.1f}% padding", examples_.size(), size(),
                     cfg_.seq_length, slots > 0 ? 100.0 * (1.0 - double(inputs) / slots) : 0.0);
}

void SftDataset::get(int64_t i, GptSample* out) const {
  CHECK(i >= 0, "SFT sample {}", i);
  const int64_t n = size(), epoch = i / n, k = i % n;
  int64_t g = k;
  if (shuffle_) {
    // Permutation of this epoch; recomputed only when the epoch changes.
    std::lock_guard<std::mutex> lock(perm_mutex_);
    if (perm_epoch_ != epoch) {
      perm_.resize(size_t(n));
      std::iota(perm_.begin(), perm_.end(), 0);
      NumpyRandomState rng(uint32_t(seed_ + uint64_t(epoch)));
      rng.shuffle(perm_.data(), n);
      perm_epoch_ = epoch;
    }
    g = perm_[size_t(k)];
  }
  std::vector<const SftExample*> group;
  for (int64_t e : groups_[size_t(g)]) group.push_back(&examples_[size_t(e)]);
  make_sft_sample(out, group, cfg_);
}

int32_t sft_pad_id(const Tokenizer& tok) { return tok.pad_id() >= 0 ? tok.pad_id() : 0; }

}  // namespace llamatrain::data
