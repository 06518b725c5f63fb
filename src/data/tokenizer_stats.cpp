// Per-script tokenizer statistics; see tokenizer_stats.h for the attribution rule.
#include "data/tokenizer_stats.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/utf8.h"
#include "data/tokenizer.h"
#include "data/tokenizer_train.h"

namespace llamatrain::data {

const char* script_name(Script s) {
  switch (s) {
    case Script::kHan: return "han";
    case Script::kLatin: return "latin";
    case Script::kOther: return "other";
  }
  return "?";
}

Script script_of(char32_t c) {
  if ((c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xF900 && c <= 0xFAFF) ||
      (c >= 0x20000 && c <= 0x3FFFF) || (c >= 0x2E80 && c <= 0x2FDF) || (c >= 0x3000 && c <= 0x303F) ||
      (c >= 0xFE30 && c <= 0xFE4F) || (c >= 0xFF00 && c <= 0xFFEF))
    return Script::kHan;
  if (c <= 0x024F || (c >= 0x1E00 && c <= 0x1EFF)) return Script::kLatin;
  return Script::kOther;
}

namespace {

struct Char {
  uint32_t begin, size;
  Script script;
};

// The document's characters (valid UTF-8: the reader checked it).
std::vector<Char> characters(const std::string& s) {
  std::vector<Char> out;
  for (const std::string_view c : utf8_chars(s))
    out.push_back(
        {static_cast<uint32_t>(c.data() - s.data()), static_cast<uint32_t>(c.size()), script_of(utf8_decode_at(c, 0))});
  return out;
}

}  // namespace

std::vector<TokenizerStats> run_tokenizer_stats(const TokenizerStatsOptions& opt) {
  if (opt.models.empty())
    fail("tokenizer stats: no model given\nhint: e.g. llamatrain tokenizer stats base.model merged.model --input "
         "text.jsonl");
  if (opt.inputs.empty()) fail("tokenizer stats: --input is required\nhint: e.g. --input text.jsonl");
  std::vector<Tokenizer> toks;
  for (const auto& m : opt.models) toks.emplace_back(m);
  TokenizerTrainOptions read;
  read.inputs = opt.inputs;
  read.json_keys = opt.json_keys;
  read.format = static_cast<TrainInputFormat>(opt.format);
  int64_t skipped = 0;
  const auto docs = read_documents(read, &skipped);
  if (docs.empty())
    fail("tokenizer stats: the input has no documents ({} lines skipped as blank, malformed or without the key)\n"
         "hint: pass JSONL with the text under --json-keys, or text with one document per line",
         skipped);

  std::vector<TokenizerStats> out(toks.size());
  for (size_t m = 0; m < toks.size(); ++m) {
    out[m].model = opt.models[m];
    out[m].vocab_size = toks[m].vocab_size();
  }
  std::vector<int> first_ids, ids;
  std::vector<std::pair<uint32_t, uint32_t>> spans;
  std::vector<int32_t> char_at;  // byte offset -> index of the character it belongs to
  for (const auto& doc : docs) {
    const auto chars = characters(doc);
    char_at.assign(doc.size() + 1, chars.empty() ? -1 : static_cast<int32_t>(chars.size()) - 1);
    bool latin = true;
    for (size_t c = 0; c < chars.size(); ++c) {
      for (uint32_t k = 0; k < chars[c].size; ++k) char_at[chars[c].begin + k] = static_cast<int32_t>(c);
      latin &= chars[c].script == Script::kLatin;
    }
    for (size_t m = 0; m < toks.size(); ++m) {
      TokenizerStats& st = out[m];
      toks[m].encode_with_spans(doc, &ids, &spans);
      ++st.documents;
      st.latin_documents += latin;
      st.tokens += static_cast<int64_t>(ids.size());
      st.chars += static_cast<int64_t>(chars.size());
      st.bytes += static_cast<int64_t>(doc.size());
      for (const auto& c : chars) {
        st.scripts[static_cast<int>(c.script)].chars += 1;
        st.scripts[static_cast<int>(c.script)].bytes += c.size;
      }
      for (size_t t = 0; t < ids.size(); ++t) {
        st.byte_tokens += toks[m].is_byte(ids[t]);
        st.unknown_tokens += toks[m].is_unknown(ids[t]);
        auto [b, e] = spans[t];
        b = std::min<uint32_t>(b, static_cast<uint32_t>(doc.size()));
        e = std::min<uint32_t>(e, static_cast<uint32_t>(doc.size()));
        if (chars.empty()) continue;
        if (e <= b) {  // covers no character: the one at its position
          st.scripts[static_cast<int>(chars[char_at[b]].script)].tokens += 1.0;
          continue;
        }
        const int32_t c0 = char_at[b], c1 = char_at[e - 1];
        const double share = 1.0 / (c1 - c0 + 1);
        for (int32_t c = c0; c <= c1; ++c) st.scripts[static_cast<int>(chars[c].script)].tokens += share;
      }
      if (m == 0) {
        first_ids = ids;
      } else if (ids != first_ids) {
        ++st.documents_differing;
        st.latin_documents_differing += latin;
      }
    }
  }
  return out;
}

namespace {

std::string ratio(double a, double b, const char* fmt_spec) {
  return b > 0 ? fmt::format(fmt::runtime(fmt_spec), a / b) : "-";
}

}  // namespace

std::string format_stats_table(const std::vector<TokenizerStats>& stats) {
  std::string out;
  const auto& f = stats.front();
  out += fmt::format("{} documents ({} Latin-only), {} characters, {} bytes; han {} / latin {} / other {} characters\n",
                     f.documents, f.latin_documents, f.chars, f.bytes, f.scripts[0].chars, f.scripts[1].chars,
                     f.scripts[2].chars);
  out += fmt::format("{:<28} {:>7} {:>9} {:>8} {:>9} {:>9} {:>9} {:>7} {:>6} {:>12}\n", "model", "vocab", "tokens",
                     "tok/char", "han", "latin", "other", "byte/tok", "bytes%", "docs differ");
  for (const auto& s : stats) {
    std::string name = s.model;
    if (name.size() > 28) name = "..." + name.substr(name.size() - 25);
    const std::string differ =
        &s == &stats.front() ? "-" : fmt::format("{} ({} lat)", s.documents_differing, s.latin_documents_differing);
    out += fmt::format("{:<28} {:>7} {:>9} {:>8} {:>9} {:>9} {:>9} {:>7} {:>6} {:>12}\n", name, s.vocab_size, s.tokens,
                       ratio(s.tokens, s.chars, "{:.3f}"), ratio(s.scripts[0].tokens, s.scripts[0].chars, "{:.3f}"),
                       ratio(s.scripts[1].tokens, s.scripts[1].chars, "{:.3f}"),
                       ratio(s.scripts[2].tokens, s.scripts[2].chars, "{:.3f}"), ratio(s.bytes, s.tokens, "{:.2f}"),
                       ratio(100.0 * s.byte_tokens, s.tokens, "{:.1f}"), differ);
  }
  out +=
      "han/latin/other: tokens per character of that script; byte/tok: bytes per token; bytes%: byte-fallback tokens";
  int64_t unk = 0;
  for (const auto& s : stats) unk += s.unknown_tokens;
  if (unk > 0) {
    out += "\nunknown tokens:";
    for (const auto& s : stats) out += fmt::format(" {} {}", s.model, s.unknown_tokens);
  }
  out += "\n";
  return out;
}

nlohmann::json stats_json(const std::vector<TokenizerStats>& stats) {
  nlohmann::json models = nlohmann::json::array();
  for (const auto& s : stats) {
    nlohmann::json j = {{"model", s.model},
                        {"vocab_size", s.vocab_size},
                        {"documents", s.documents},
                        {"latin_documents", s.latin_documents},
                        {"tokens", s.tokens},
                        {"characters", s.chars},
                        {"bytes", s.bytes},
                        {"tokens_per_character", s.chars ? double(s.tokens) / s.chars : 0.0},
                        {"bytes_per_token", s.tokens ? double(s.bytes) / s.tokens : 0.0},
                        {"byte_fallback_tokens", s.byte_tokens},
                        {"byte_fallback_share", s.tokens ? double(s.byte_tokens) / s.tokens : 0.0},
                        {"unknown_tokens", s.unknown_tokens},
                        {"unknown_share", s.tokens ? double(s.unknown_tokens) / s.tokens : 0.0},
                        {"documents_differing", s.documents_differing},
                        {"latin_documents_differing", s.latin_documents_differing}};
    for (int k = 0; k < kNumScripts; ++k) {
      const auto& sc = s.scripts[k];
      j["scripts"][script_name(static_cast<Script>(k))] = {
          {"tokens", sc.tokens},
          {"characters", sc.chars},
          {"bytes", sc.bytes},
          {"tokens_per_character", sc.chars ? sc.tokens / sc.chars : 0.0},
          {"bytes_per_token", sc.tokens > 0 ? sc.bytes / sc.tokens : 0.0}};
    }
    models.push_back(j);
  }
  return {{"models", models}};
}

}  // namespace llamatrain::data
