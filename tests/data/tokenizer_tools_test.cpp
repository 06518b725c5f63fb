// `llamatrain tokenizer train | merge | stats` on generated English and Chinese text: the trained
// model carries Llama 2's settings and encodes in SentencePiece's Python module as in ours; the
// merged model keeps every base piece, loads in Python and encodes a mixed corpus to the same ids,
// round-trips, shortens Chinese, and leaves English alone under the default score rule (the
// anchors' rule, score 0, does not); padding pieces never occur; stats match an independent Python
// computation (tools/reference/tokenizer_check.py); broken models and inputs are plain errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <set>
#include <tuple>

#include "core/error.h"
#include "data/model_proto.h"
#include "data/tokenizer.h"
#include "data/tokenizer_stats.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::run_cli;
using Json = nlohmann::json;

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// Zipf-distributed words: word k has weight 1/(k+1).
struct Lexicon {
  std::vector<std::string> words;
  std::discrete_distribution<int> pick;
  const std::string& draw(std::mt19937& rng) { return words[pick(rng)]; }
};

Lexicon make_lexicon(std::vector<std::string> words) {
  std::vector<double> w(words.size());
  for (size_t k = 0; k < w.size(); ++k) w[k] = 1.0 / static_cast<double>(k + 1);
  return {std::move(words), std::discrete_distribution<int>(w.begin(), w.end())};
}

// English-like words from syllables (ASCII letters only).
Lexicon english_words(std::mt19937& rng) {
  const char* on[] = {"b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "w", "th", "st", "pr", "ch"};
  const char* nu[] = {"a", "e", "i", "o", "u", "ea", "ou", "ai"};
  const char* co[] = {"", "", "n", "r", "s", "t", "ng", "ld", "ck"};
  std::vector<std::string> words;
  for (int k = 0; k < 1500; ++k) {
    std::string w;
    for (int s = 0, n = 1 + static_cast<int>(rng() % 3); s < n; ++s)
      w.append(on[rng() % 18]).append(nu[rng() % 8]).append(co[rng() % 9]);
    words.push_back(w);
  }
  return make_lexicon(std::move(words));
}

// Chinese-like words of 1-3 characters from 600 Han characters.
Lexicon chinese_words(std::mt19937& rng) {
  std::vector<std::string> words;
  for (int k = 0; k < 2500; ++k) {
    std::string w;
    for (int c = 0, n = 1 + static_cast<int>(rng() % 3); c < n; ++c) w += utf8(0x4E00 + 17 * (rng() % 600));
    words.push_back(w);
  }
  return make_lexicon(std::move(words));
}

std::string english_doc(Lexicon& en, std::mt19937& rng) {
  std::string d;
  for (int s = 0, n = 1 + static_cast<int>(rng() % 4); s < n; ++s) {
    if (s) d += rng() % 4 ? " " : "\n";
    for (int w = 0, m = 4 + static_cast<int>(rng() % 10); w < m; ++w) {
      std::string word = en.draw(rng);
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      if (w) d += ' ';
      d += word;
      if (rng() % 40 == 0) {
        d += ' ';
        d += std::to_string(rng() % 2000);
      }
      if (w + 1 < m && rng() % 12 == 0) d += ",";
    }
    d += rng() % 6 ? "." : "?";
  }
  return d;
}

// Chinese sentences; with `latin`, some English words among them, as Chinese corpora have.
std::string chinese_doc(Lexicon& zh, Lexicon& en, std::mt19937& rng, bool latin) {
  std::string d;
  for (int s = 0, n = 1 + static_cast<int>(rng() % 4); s < n; ++s) {
    for (int w = 0, m = 4 + static_cast<int>(rng() % 12); w < m; ++w) {
      if (latin && rng() % 15 == 0) {
        d += ' ';
        d += en.draw(rng);
        d += ' ';
      } else {
        d += zh.draw(rng);
      }
      if (w + 1 < m && rng() % 8 == 0) d += "，";
    }
    d += "。";
  }
  return d;
}

void write_jsonl(const std::string& path, const std::vector<std::string>& docs) {
  std::ofstream f(path, std::ios::binary);
  for (const auto& d : docs) f << Json{{"text", d}}.dump() << "\n";
}

std::vector<std::string> read_jsonl(const std::string& path) {
  std::vector<std::string> docs;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) docs.push_back(Json::parse(line)["text"].get<std::string>());
  return docs;
}

Json python_json(const std::vector<std::string>& args) {
  std::string cmd = testing::system_python() + " " + testing::source_path("tools/reference/tokenizer_check.py");
  for (const auto& a : args) cmd += " '" + a + "'";
  std::string out;
  EXPECT_EQ(testing::run_capture(cmd, &out), 0) << cmd << "\n" << out;
  return Json::parse(out);
}

// The corpora and the models every case uses, made once: en.model (1024 pieces) from English,
// zh.model (2000) from Chinese with some English words, merged.model from both by default rules.
class TokenizerTools : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    std::mt19937 rng(1234);
    Lexicon en = english_words(rng), zh = chinese_words(rng);
    std::vector<std::string> english, chinese, mixed, zh_only;
    for (int k = 0; k < 1500; ++k) english.push_back(english_doc(en, rng));            // ~250 KB
    for (int k = 0; k < 1000; ++k) chinese.push_back(chinese_doc(zh, en, rng, true));  // ~250 KB
    for (int k = 0; k < 200; ++k) zh_only.push_back(chinese_doc(zh, en, rng, false));
    for (int k = 0; k < 200; ++k) mixed.push_back(k % 2 ? english_doc(en, rng) : chinese_doc(zh, en, rng, true));
    write_jsonl(path("en.jsonl"), english);
    write_jsonl(path("zh.jsonl"), chinese);
    write_jsonl(path("zh_only.jsonl"), zh_only);
    write_jsonl(path("mixed.jsonl"), mixed);
    train_log_ = new std::string();
    for (auto [in, out, v] : {std::tuple{"en.jsonl", "en.model", "1024"}, {"zh.jsonl", "zh.model", "2000"}}) {
      auto r =
          run_cli({"tokenizer", "train", "--input", path(in), "-o", path(out), "--vocab-size", v, "--threads", "1"});
      ASSERT_EQ(r.code, 0) << testing::describe(r);
      *train_log_ += r.err;
    }
    auto r = run_cli({"tokenizer", "merge", path("en.model"), path("zh.model"), "-o", path("merged.model")});
    ASSERT_EQ(r.code, 0) << testing::describe(r);
    *merge_log_ = r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete train_log_;
  }
  static std::string path(const std::string& name) { return *dir_ / name; }
  static testing::TempDir* dir_;
  static std::string* train_log_;
  static std::string merge_log_[1];
};
testing::TempDir* TokenizerTools::dir_ = nullptr;
std::string* TokenizerTools::train_log_ = nullptr;
std::string TokenizerTools::merge_log_[1];

TEST_F(TokenizerTools, TrainReportsPiecesAndTimeAndWritesALlama2StyleModel) {
  EXPECT_NE(train_log_->find("en.model: 1024 pieces (bpe), trained in"), std::string::npos) << *train_log_;
  EXPECT_NE(train_log_->find("read 1500 documents from 1 file"), std::string::npos) << *train_log_;
  data::Tokenizer t(path("en.model"));
  EXPECT_EQ(t.vocab_size(), 1024);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.pad_id(), -1);
  EXPECT_EQ(t.id_to_piece(0), "<unk>");
  EXPECT_TRUE(t.is_byte(3));  // <0x00> right after the specials
  EXPECT_EQ(t.id_to_piece(3 + 0x41), "<0x41>");
  // split_digits: a number is one token per digit.
  auto ids = t.encode("in 1984");
  int digits = 0;
  for (int id : ids) digits += t.id_to_piece(id).size() == 1 && std::isdigit(t.id_to_piece(id)[0]);
  EXPECT_EQ(digits, 4);
}

TEST_F(TokenizerTools, TrainedModelHasLlama2SettingsAndEncodesAsInPython) {
  if (auto why = testing::python_missing({"sentencepiece", "google.protobuf"}); !why.empty()) GTEST_SKIP() << why;
  Json s = python_json({"spec", path("en.model")});
  EXPECT_EQ(s["model_type"], 2);  // BPE
  EXPECT_EQ(s["vocab_size"], 1024);
  EXPECT_EQ(s["byte_fallback"], true);
  EXPECT_EQ(s["split_digits"], true);
  EXPECT_EQ(s["allow_whitespace_only_pieces"], true);
  EXPECT_NEAR(s["character_coverage"].get<double>(), 0.9995, 1e-6);
  EXPECT_EQ(s["unk_id"], 0);
  EXPECT_EQ(s["bos_id"], 1);
  EXPECT_EQ(s["eos_id"], 2);
  EXPECT_EQ(s["pad_id"], -1);
  EXPECT_EQ(s["normalization_rule_name"], "identity");
  EXPECT_EQ(s["remove_extra_whitespaces"], false);
  EXPECT_EQ(s["add_dummy_prefix"], true);
  Json e = python_json({"encode", path("en.model"), path("mixed.jsonl")});
  data::Tokenizer t(path("en.model"));
  const auto docs = read_jsonl(path("mixed.jsonl"));
  ASSERT_EQ(e["ids"].size(), docs.size());
  for (size_t k = 0; k < docs.size(); ++k)
    ASSERT_EQ(t.encode(docs[k]), e["ids"][k].get<std::vector<int>>()) << "document " << k << ": " << docs[k];
}

TEST_F(TokenizerTools, MergeKeepsEveryBasePieceAndAppendsTheMissingOnesBelowTheBaseScores) {
  const auto base = data::parse_model_proto(testing::read_file(path("en.model")), "en");
  const auto add = data::parse_model_proto(testing::read_file(path("zh.model")), "zh");
  const auto merged = data::parse_model_proto(testing::read_file(path("merged.model")), "merged");
  ASSERT_GT(merged.pieces.size(), base.pieces.size());
  float lowest = 0;
  std::set<std::string> base_text;
  for (size_t i = 0; i < base.pieces.size(); ++i) {
    EXPECT_EQ(merged.pieces[i].piece, base.pieces[i].piece) << i;
    EXPECT_EQ(merged.pieces[i].score, base.pieces[i].score) << i;
    EXPECT_EQ(merged.pieces[i].type, base.pieces[i].type) << i;
    lowest = std::min(lowest, base.pieces[i].score);
    base_text.insert(base.pieces[i].piece);
  }
  EXPECT_EQ(merged.before, base.before);
  EXPECT_EQ(merged.after, base.after);  // trainer and normalizer specs byte for byte
  // New pieces: ADD's normal pieces BASE lacks, in ADD's order, strictly below every base score.
  std::vector<std::string> expected;
  for (const auto& p : add.pieces)
    if (p.type == data::PieceType::kNormal && !base_text.count(p.piece)) expected.push_back(p.piece);
  size_t j = 0;
  float prev = lowest;
  for (size_t i = base.pieces.size(); i < merged.pieces.size(); ++i) {
    while (j < expected.size() && expected[j] != merged.pieces[i].piece) ++j;  // the left-out ones
    ASSERT_LT(j, expected.size()) << merged.pieces[i].piece << " is not an ADD piece in ADD's order";
    EXPECT_EQ(merged.pieces[i].type, data::PieceType::kNormal);
    EXPECT_LT(merged.pieces[i].score, prev);
    prev = merged.pieces[i].score;
  }
  // The same seen by protobuf itself (SentencePiece's Python module).
  if (testing::python_missing({"sentencepiece", "google.protobuf"}).empty()) {
    const Json b = python_json({"spec", path("en.model")}), m = python_json({"spec", path("merged.model")});
    ASSERT_EQ(m["pieces"].size(), merged.pieces.size());
    for (size_t i = 0; i < b["pieces"].size(); ++i) ASSERT_EQ(m["pieces"][i], b["pieces"][i]) << i;
    for (const char* k : {"model_type", "vocab_size", "byte_fallback", "normalization_rule_name", "add_dummy_prefix"})
      EXPECT_EQ(m[k], b[k]) << k;
  }
  const size_t added = merged.pieces.size() - base.pieces.size();
  EXPECT_NE(merge_log_[0].find(std::to_string(added) + " added"), std::string::npos) << merge_log_[0];
  EXPECT_NE(merge_log_[0].find("already in"), std::string::npos) << merge_log_[0];
}

TEST_F(TokenizerTools, MergedModelEncodesInPythonAsOursRoundTripsAndShortensChinese) {
  if (auto why = testing::python_missing({"sentencepiece"}); !why.empty()) GTEST_SKIP() << why;
  data::Tokenizer t(path("merged.model"));
  const auto docs = read_jsonl(path("mixed.jsonl"));
  Json e = python_json({"encode", path("merged.model"), path("mixed.jsonl")});
  ASSERT_EQ(e["ids"].size(), docs.size());
  for (size_t k = 0; k < docs.size(); ++k) {
    const auto ids = t.encode(docs[k]);
    ASSERT_EQ(ids, e["ids"][k].get<std::vector<int>>()) << "document " << k << ": " << docs[k];
    ASSERT_EQ(t.decode(ids), docs[k]) << k;
  }
  EXPECT_EQ(e["roundtrip"], docs.size());

  data::TokenizerStatsOptions so;
  so.models = {path("en.model"), path("merged.model")};
  so.inputs = {path("zh_only.jsonl")};
  const auto st = data::run_tokenizer_stats(so);
  const double before = st[0].scripts[0].tokens / st[0].scripts[0].chars;
  const double after = st[1].scripts[0].tokens / st[1].scripts[0].chars;
  EXPECT_GT(before, 2.5);  // the English base spells Han characters in UTF-8 bytes: 3 per character
  EXPECT_LT(after * 2.0, before) << before << " -> " << after;
  EXPECT_EQ(st[1].documents_differing, st[1].documents);
}

// The default rule: no English document changes, since every character of it has a base piece.
// The anchors' rule (score 0 and every piece): new Latin pieces merge first and English changes.
TEST_F(TokenizerTools, EnglishEncodesAsUnderTheBaseByDefaultAndNotUnderScoreZero) {
  auto r = run_cli({"tokenizer", "merge", path("en.model"), path("zh.model"), "-o", path("zero.model"), "--new-scores",
                    "zero", "--all-pieces"});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  r = run_cli(
      {"tokenizer", "merge", path("en.model"), path("zh.model"), "-o", path("below_all.model"), "--all-pieces"});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  data::TokenizerStatsOptions so;
  so.models = {path("en.model"), path("merged.model"), path("below_all.model"), path("zero.model")};
  so.inputs = {path("en.jsonl")};
  const auto st = data::run_tokenizer_stats(so);
  // (The base spells a few rare characters in bytes; ADD has no piece for them, so they stay.)
  EXPECT_EQ(st[1].latin_documents, 1500);
  EXPECT_EQ(st[1].documents_differing, 0);
  EXPECT_EQ(st[1].tokens, st[0].tokens);
  EXPECT_GT(st[3].documents_differing, 100) << "score 0 should reorder merges in English";
  // Scores below but pieces of base characters added: such a piece forms after the base's merges.
  std::printf("English documents differing from the base: default %lld, --all-pieces %lld, --new-scores zero "
              "--all-pieces %lld of %lld\n",
              static_cast<long long>(st[1].documents_differing), static_cast<long long>(st[2].documents_differing),
              static_cast<long long>(st[3].documents_differing), static_cast<long long>(st[0].documents));
  EXPECT_LE(st[2].tokens, st[0].tokens);  // such merges only join base tokens
}

// A base like Llama 2's: English with some hundreds of Han characters as pieces of their own but no
// Han pieces of two (Llama 2 has 700 and none), and an addition trained on Chinese prose with line
// breaks. The default merge must give Chinese nearly all that --all-pieces gives (a Chinese word made
// of the base's characters is wanted: Han is new to the base) and leave English documents, line
// breaks included, encoded exactly as the base encodes them.
TEST_F(TokenizerTools, ANewScriptGetsItsPiecesEvenOfBaseCharactersAndEnglishStaysAsUnderTheBase) {
  std::mt19937 rng(99);
  Lexicon en = english_words(rng), zh = chinese_words(rng);
  std::vector<std::string> base_docs, add_docs, zh_heldout, en_heldout;
  // English without line breaks: the base spells them in bytes, as Llama 2 spells "\n" in <0x0A>.
  for (int k = 0; k < 1500; ++k) {
    std::string d = english_doc(en, rng);
    std::replace(d.begin(), d.end(), '\n', ' ');
    base_docs.push_back(d);
  }
  // 400 of the 600 Han characters, each alone between spaces: pieces of their own, no Han merges.
  for (int k = 0; k < 40; ++k) {
    std::string d;
    for (int c = 0; c < 400; ++c) {
      if (c) d += ' ';
      d += utf8(0x4E00 + 17 * ((c + k) % 400));
    }
    base_docs.push_back(d);
  }
  for (int k = 0; k < 1000; ++k)
    add_docs.push_back(chinese_doc(zh, en, rng, true) + "\n" + chinese_doc(zh, en, rng, true) + "\n\n" +
                       chinese_doc(zh, en, rng, false));
  for (int k = 0; k < 200; ++k) zh_heldout.push_back(chinese_doc(zh, en, rng, false));
  for (int k = 0; k < 400; ++k)
    en_heldout.push_back(english_doc(en, rng) + "\n" + english_doc(en, rng) + "\n\n\t" + english_doc(en, rng));
  write_jsonl(path("han_base.jsonl"), base_docs);
  write_jsonl(path("zh_lines.jsonl"), add_docs);
  write_jsonl(path("zh_heldout.jsonl"), zh_heldout);
  write_jsonl(path("en_lines.jsonl"), en_heldout);
  for (auto [in, out, v] :
       {std::tuple{"han_base.jsonl", "han_base.model", "1600"}, {"zh_lines.jsonl", "zh_lines.model", "2000"}}) {
    auto r = run_cli({"tokenizer", "train", "--input", path(in), "-o", path(out), "--vocab-size", v, "--threads", "1"});
    ASSERT_EQ(r.code, 0) << testing::describe(r);
  }
  // The base is what this case needs: the Han characters as pieces, hardly any Han piece of two.
  const auto base = data::parse_model_proto(testing::read_file(path("han_base.model")), "han_base");
  int han_chars = 0, han_multi = 0, multi = 0;
  for (const auto& p : base.pieces) {
    std::string text = p.piece;
    for (size_t at; (at = text.find("\u2581")) != std::string::npos;) text.erase(at, 3);
    const bool han = text.find("\xe4") != std::string::npos || text.find("\xe5") != std::string::npos ||
                     text.find("\xe6") != std::string::npos || text.find("\xe7") != std::string::npos;
    const size_t chars = std::count_if(text.begin(), text.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; });
    if (p.type != data::PieceType::kNormal) continue;
    han_chars += han && chars == 1;
    multi += chars >= 2;
    han_multi += han && chars >= 2;
  }
  ASSERT_GE(han_chars, 300);
  ASSERT_LE(han_multi * 100, multi) << "the base must not merge Han (as Llama 2 does not)";
  const auto add = data::parse_model_proto(testing::read_file(path("zh_lines.model")), "zh_lines");
  ASSERT_TRUE(std::any_of(add.pieces.begin(), add.pieces.end(), [](const data::ModelPiece& p) {
    return p.type == data::PieceType::kNormal && p.piece.find('\n') != std::string::npos;
  })) << "the addition must have pieces with line breaks for this case";

  auto r =
      run_cli({"tokenizer", "merge", path("han_base.model"), path("zh_lines.model"), "-o", path("han_default.model")});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  EXPECT_NE(r.err.find("new scripts: Han"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("with a line break, tab or space it spells in bytes"), std::string::npos) << r.err;
  const std::string log = r.err;
  r = run_cli({"tokenizer", "merge", path("han_base.model"), path("zh_lines.model"), "-o", path("han_all.model"),
               "--all-pieces"});
  ASSERT_EQ(r.code, 0) << testing::describe(r);

  data::TokenizerStatsOptions so;
  so.models = {path("han_base.model"), path("han_default.model"), path("han_all.model")};
  so.inputs = {path("zh_heldout.jsonl")};
  const auto zh_stats = data::run_tokenizer_stats(so);
  so.inputs = {path("en_lines.jsonl")};
  const auto en_stats = data::run_tokenizer_stats(so);
  auto per_han = [](const data::TokenizerStats& st) { return st.scripts[0].tokens / st.scripts[0].chars; };
  const double base_rate = per_han(zh_stats[0]), def = per_han(zh_stats[1]), all = per_han(zh_stats[2]);
  std::printf("tokens per Han character: base %.3f, default merge %.3f, --all-pieces %.3f; English documents "
              "differing: default %lld, --all-pieces %lld of %lld\n%s",
              base_rate, def, all, static_cast<long long>(en_stats[1].documents_differing),
              static_cast<long long>(en_stats[2].documents_differing), static_cast<long long>(en_stats[0].documents),
              log.c_str());
  ASSERT_LT(all, base_rate);
  EXPECT_GE(base_rate - def, 0.9 * (base_rate - all)) << "the default must give Chinese at least 90% of --all-pieces";
  EXPECT_LE(en_stats[1].documents_differing * 1000, en_stats[1].documents * 5) << "at most 0.5% of English may change";
  EXPECT_GT(en_stats[2].documents_differing, en_stats[1].documents_differing) << "--all-pieces does change English";
  // SentencePiece's own module loads the result and encodes as ours.
  if (testing::python_missing({"sentencepiece"}).empty()) {
    data::Tokenizer t(path("han_default.model"));
    const Json e = python_json({"encode", path("han_default.model"), path("zh_heldout.jsonl")});
    for (size_t k = 0; k < zh_heldout.size(); ++k)
      ASSERT_EQ(t.encode(zh_heldout[k]), e["ids"][k].get<std::vector<int>>()) << k;
  }
}

// New scores keep ADD's order where a step of 1 rounds away in float32 (below Llama 2's -1e9).
TEST_F(TokenizerTools, NewScoresBelowAVeryLowBaseScoreStayDistinct) {
  auto base = data::parse_model_proto(testing::read_file(path("en.model")), "en");
  for (auto& p : base.pieces)
    if (p.type == data::PieceType::kNormal && p.score < -10) {
      p.score = -1e9f;
      p.raw.clear();  // written again with the new score
    }
  testing::write_file(path("low.model"), data::serialize_model_proto(base));
  auto r = run_cli({"tokenizer", "merge", path("low.model"), path("zh.model"), "-o", path("low_merged.model")});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  const auto merged = data::parse_model_proto(testing::read_file(path("low_merged.model")), "low_merged");
  ASSERT_GT(merged.pieces.size(), base.pieces.size() + 10);
  for (size_t i = base.pieces.size(); i < merged.pieces.size(); ++i)
    EXPECT_LT(merged.pieces[i].score, i == base.pieces.size() ? -1e9f : merged.pieces[i - 1].score) << i;
}

TEST_F(TokenizerTools, PaddingReachesTheMultipleAndNeverAppearsInAnEncoding) {
  auto r = run_cli({"tokenizer", "merge", path("en.model"), path("zh.model"), "-o", path("padded.model"),
                    "--pad-to-multiple", "512"});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  EXPECT_NE(r.err.find("padding"), std::string::npos) << r.err;
  data::Tokenizer padded(path("padded.model")), merged(path("merged.model"));
  EXPECT_EQ(padded.vocab_size() % 512, 0);
  EXPECT_GT(padded.vocab_size(), merged.vocab_size());
  for (int id = merged.vocab_size(); id < padded.vocab_size(); ++id) EXPECT_TRUE(padded.is_unused(id)) << id;
  // Text that spells a padding piece, and the whole corpus, encode as without padding.
  auto docs = read_jsonl(path("mixed.jsonl"));
  docs.push_back("<unused_0> <unused_1><unused_7>");
  for (const auto& d : docs) {
    const auto ids = padded.encode(d);
    EXPECT_EQ(ids, merged.encode(d)) << d;
    for (int id : ids) ASSERT_LT(id, merged.vocab_size()) << d;
  }
  if (testing::python_missing({"sentencepiece"}).empty()) {
    Json e = python_json({"encode", path("padded.model"), path("mixed.jsonl")});
    for (const auto& ids : e["ids"])
      for (int id : ids) ASSERT_LT(id, merged.vocab_size());
  }
}

TEST_F(TokenizerTools, StatsMatchAnIndependentPythonComputation) {
  if (auto why = testing::python_missing({"sentencepiece"}); !why.empty()) GTEST_SKIP() << why;
  auto r = run_cli({"tokenizer", "stats", path("en.model"), path("merged.model"), path("zh.model"), "--input",
                    path("mixed.jsonl"), "--json"});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  const Json ours = Json::parse(r.out);
  const Json ref =
      python_json({"stats", path("en.model"), path("merged.model"), path("zh.model"), path("mixed.jsonl")});
  ASSERT_EQ(ours["models"].size(), 3u);
  for (size_t m = 0; m < 3; ++m) {
    const Json &a = ours["models"][m], &b = ref["models"][m];
    for (const char* k : {"tokens", "characters", "bytes", "byte_fallback_tokens", "unknown_tokens",
                          "documents_differing", "latin_documents_differing", "latin_documents"})
      EXPECT_EQ(a[k], b[k]) << k << " of model " << m;
    double sum = 0;
    for (const char* s : {"han", "latin", "other"}) {
      EXPECT_EQ(a["scripts"][s]["characters"], b["scripts"][s]["characters"]) << s;
      EXPECT_EQ(a["scripts"][s]["bytes"], b["scripts"][s]["bytes"]) << s;
      EXPECT_NEAR(a["scripts"][s]["tokens"].get<double>(), b["scripts"][s]["tokens"].get<double>(), 1e-6) << s;
      sum += a["scripts"][s]["tokens"].get<double>();
    }
    EXPECT_NEAR(sum, a["tokens"].get<double>(), 1e-6);  // every token counted once
  }
  EXPECT_GT(ours["models"][0]["byte_fallback_tokens"].get<int>(), 0);
  // The table: one row per model.
  r = run_cli({"tokenizer", "stats", path("en.model"), path("merged.model"), "--input", path("mixed.jsonl")});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  EXPECT_NE(r.out.find("tok/char"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("merged.model"), std::string::npos) << r.out;
}

TEST_F(TokenizerTools, MergeOfABrokenModelNamesTheFile) {
  const std::string good = testing::read_file(path("en.model"));
  testing::write_file(path("truncated.model"), good.substr(0, good.size() / 2 + 3));
  std::string flipped = good;
  for (size_t i = 0; i < 40; ++i) flipped[i * 7] = static_cast<char>(0xFF);
  testing::write_file(path("corrupt.model"), flipped);
  testing::write_file(path("empty.model"), "");
  testing::write_file(path("text.model"), "this is not a model\n");
  for (const char* bad : {"truncated.model", "corrupt.model", "empty.model", "text.model", "missing.model"}) {
    for (bool as_base : {true, false}) {
      auto r = run_cli({"tokenizer", "merge", as_base ? path(bad) : path("en.model"),
                        as_base ? path("zh.model") : path(bad), "-o", path("out.model")});
      testing::expect_plain_error(r, {path(bad)});
      EXPECT_FALSE(testing::exists(path("out.model"))) << bad;
    }
  }
  // Nothing to add: BASE's bytes exactly.
  auto r = run_cli({"tokenizer", "merge", path("en.model"), path("en.model"), "-o", path("same.model")});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  EXPECT_EQ(testing::read_file(path("same.model")), good);
  EXPECT_NE(r.err.find("0 added"), std::string::npos) << r.err;
  // Every truncation of a real model is either a model or a plain error, never a crash.
  const std::string small = testing::read_file(testing::fixture("tokenizer.model"));
  int refused = 0;
  for (size_t n = 0; n < small.size(); n += 97) {
    try {
      data::parse_model_proto(std::string_view(small).substr(0, n), "cut");
    } catch (const Error& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find("cut"), std::string::npos);
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(ModelProto, ParseAndSerializeRoundTripByteForByte) {
  for (const auto& f :
       {testing::fixture("tokenizer.model"), testing::source_path("tests/golden/tiny_hf/tokenizer.model")}) {
    const std::string bytes = testing::read_file(f);
    const auto m = data::parse_model_proto(bytes, f);
    EXPECT_EQ(data::serialize_model_proto(m), bytes) << f;
    // Re-encoding each piece from its fields gives the same bytes protobuf wrote.
    for (const auto& p : m.pieces) {
      data::ModelPiece q = p;
      q.raw.clear();
      std::string enc;
      data::append_piece_record(&enc, q);
      ASSERT_EQ(enc, p.raw) << p.piece;
    }
  }
}

TEST_F(TokenizerTools, TrainErrorsArePlainAndSayWhatToDo) {
  testing::write_file(path("empty.jsonl"), "\n\n");
  testing::write_file(path("tiny.txt"), "hello world\nhello there\n");
  {
    const std::string gz = path("en.jsonl.gz");
    ASSERT_EQ(std::system(("gzip -c " + path("en.jsonl") + " | head -c 30000 > " + gz).c_str()), 0);
    auto r = run_cli({"tokenizer", "train", "--input", gz, "-o", path("x.model"), "--vocab-size", "300"});
    testing::expect_plain_error(r, {gz, "truncated or damaged"});
    r = run_cli(
        {"tokenizer", "train", "--input", path("tiny.txt"), "-o", path("no/such/dir/x.model"), "--vocab-size", "300"});
    testing::expect_plain_error(r, {"no/such/dir"});
  }
  auto r =
      run_cli({"tokenizer", "train", "--input", path("nothing.jsonl"), "-o", path("x.model"), "--vocab-size", "300"});
  testing::expect_plain_error(r, {"nothing.jsonl"});
  r = run_cli({"tokenizer", "train", "--input", path("empty.jsonl"), "-o", path("x.model"), "--vocab-size", "300"});
  testing::expect_plain_error(r, {"no documents", "hint:"});
  r = run_cli({"tokenizer", "train", "--input", path("tiny.txt"), "-o", path("x.model"), "--vocab-size", "5000"});
  testing::expect_plain_error(r, {"--vocab-size 5000", "hint: pass --vocab-size"});
  r = run_cli({"tokenizer", "train", "--input", path("tiny.txt"), "-o", path("x.model"), "--vocab-size", "100"});
  testing::expect_plain_error(r, {"--vocab-size 100 is too small", "hint:"});
  EXPECT_FALSE(testing::exists(path("x.model")));
}

TEST_F(TokenizerTools, LongDocumentsAreCutAtLineBreaksAndCounted) {
  std::string doc;
  for (int k = 0; doc.size() < 40000; ++k) doc += "line number " + std::to_string(k) + " of a long document\n";
  write_jsonl(path("long.jsonl"), {doc, "a short one"});
  auto r = run_cli({"tokenizer", "train", "--input", path("long.jsonl"), "-o", path("long.model"), "--vocab-size",
                    "300", "--max-sentence-length", "16384", "--threads", "1"});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  EXPECT_NE(r.err.find("read 2 documents from 1 file (1 longer than 16384 bytes cut at line breaks into 4 sentences)"),
            std::string::npos)
      << r.err;
  // A name without a known extension is read by its first line: JSONL here.
  std::filesystem::copy_file(path("long.jsonl"), path("long.data"));
  r = run_cli({"tokenizer", "train", "--input", path("long.data"), "-o", path("long2.model"), "--vocab-size", "300",
               "--threads", "1"});
  ASSERT_EQ(r.code, 0) << testing::describe(r);
  EXPECT_NE(r.err.find("read 2 documents"), std::string::npos) << r.err;
  EXPECT_EQ(testing::read_file(path("long2.model")), testing::read_file(path("long.model")));
}

}  // namespace
}  // namespace llamatrain
