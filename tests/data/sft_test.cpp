// Fine-tuning data: JSONL rows to prompt/completion (plain keys and a QNLI-style template with a
// label map), tokenization with BOS/EOS, loss masks on the completion only, padding, packing,
// truncation counts, malformed-row counts with locations, and the per-epoch order.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "core/error.h"
#include "data/sft.h"
#include "data/tokenizer_train.h"
#include "data/tokenizer.h"

using namespace llamatrain;
using namespace llamatrain::data;
namespace fs = std::filesystem;

namespace {

// A 400-piece BPE model (bos 1, eos 2, no pad) trained with spm_train on synthetic English.
const Tokenizer& tok() {
  static Tokenizer t(std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/sft/tiny_bpe.model");
  return t;
}

std::vector<int32_t> enc(const std::string& s) {
  auto v = tok().encode(s);
  return std::vector<int32_t>(v.begin(), v.end());
}

SftConfig qnli_config(int64_t L) {
  SftConfig c;
  c.prompt_template = "Question: {question}\nSentence: {sentence}\nAnswer:";
  c.completion_key = "label";
  c.completion_map = {{"entailment", "yes"}, {"not_entailment", "no"}};
  c.seq_length = L;
  return c;
}

fs::path write_temp(const std::string& name, const std::string& content) {
  fs::path p = fs::temp_directory_path() / ("sft_test_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

}  // namespace

TEST(SftRows, PlainKeysAndQnliTemplate) {
  SftConfig plain;
  std::string p, c, why;
  ASSERT_TRUE(sft_row_text(R"({"input": "What is water?", "output": "A liquid."})", plain, &p, &c, &why));
  EXPECT_EQ(p, "What is water?");
  EXPECT_EQ(c, "A liquid.");

  SftConfig q = qnli_config(64);
  ASSERT_TRUE(sft_row_text(
      R"({"question": "Who was king?", "sentence": "The king of France.", "label": "entailment", "idx": 3})", q, &p, &c,
      &why))
      << why;
  EXPECT_EQ(p, "Question: Who was king?\nSentence: The king of France.\nAnswer:");
  EXPECT_EQ(c, "yes");
  // Numbers fill placeholders and map keys; {{ }} are literal braces.
  SftConfig n = q;
  n.prompt_template = "{{id {idx}}} {question}";
  n.completion_map = {{"0", "yes"}, {"1", "no"}};
  ASSERT_TRUE(sft_row_text(R"({"question": "Q?", "label": 1, "idx": 7})", n, &p, &c, &why)) << why;
  EXPECT_EQ(p, "{id 7} Q?");
  EXPECT_EQ(c, "no");

  struct Bad {
    const char* row;
    const char* reason;
  };
  for (auto [row, reason] :
       {Bad{R"({"question": "Q?", "sentence": "S", "label": "maybe"})", "\"label\" value not in the completion map"},
        Bad{R"({"question": "Q?", "label": "entailment"})", "missing key \"sentence\""},
        Bad{R"({"question": ["Q?"], "sentence": "S", "label": "entailment"})",
            "\"question\" is not a string or number"},
        Bad{R"([1, 2])", "not a JSON object"}, Bad{R"({"question": "Q?", )", "invalid JSON"}}) {
    EXPECT_FALSE(sft_row_text(row, q, &p, &c, &why)) << row;
    EXPECT_EQ(why, reason) << row;
  }
  EXPECT_FALSE(sft_row_text(R"({"input": "x", "output": 3})", plain, &p, &c, &why));
  EXPECT_EQ(why, "\"output\" is not a string");
  for (const char* t : {"{", "}", "{}", "a {b {c}", "x}y"}) EXPECT_THROW(validate_prompt_template(t), Error) << t;
  EXPECT_NO_THROW(validate_prompt_template("{{literal}} {field}"));
}

TEST(SftSamples, PaddedExampleMasksOnlyCompletionAndEos) {
  SftConfig cfg = qnli_config(48);
  cfg.pad_id = 0;
  std::string prompt = "Question: What is the capital of France?\nSentence: Paris is the capital.\nAnswer:";
  bool truncated = true;
  SftExample ex = tokenize_sft_example(prompt, "yes", tok(), cfg, &truncated);
  EXPECT_FALSE(truncated);
  std::vector<int32_t> want{1};
  for (int32_t id : enc(prompt)) want.push_back(id);
  const int64_t prompt_len = int64_t(want.size());
  for (int32_t id : enc("yes")) want.push_back(id);
  want.push_back(2);
  ASSERT_EQ(ex.text, want);
  ASSERT_EQ(ex.prompt_len, prompt_len);
  ASSERT_LE(int64_t(want.size()), 49);

  GptSample s;
  make_sft_sample(&s, {&ex}, cfg);
  const int64_t n = int64_t(want.size());
  for (int64_t t = 0; t < 48; t++) {
    SCOPED_TRACE(t);
    if (t < n) {
      EXPECT_EQ(s.tokens[size_t(t)], want[size_t(t)]);
      EXPECT_EQ(s.position_ids[size_t(t)], t);
    } else {
      EXPECT_EQ(s.tokens[size_t(t)], 0);  // pad id
    }
    if (t + 1 < n) {
      EXPECT_EQ(s.labels[size_t(t)], want[size_t(t + 1)]);
      EXPECT_EQ(s.loss_mask[size_t(t)], t + 1 >= prompt_len ? 1.0f : 0.0f);
    } else {
      EXPECT_EQ(s.labels[size_t(t)], kIgnoreLabel);
      EXPECT_EQ(s.loss_mask[size_t(t)], 0.0f);
    }
  }
  float masked = std::accumulate(s.loss_mask.begin(), s.loss_mask.end(), 0.0f);
  EXPECT_EQ(masked, float(enc("yes").size() + 1));  // completion ids + EOS
}

TEST(SftSamples, TruncationKeepsTheCompletion) {
  SftConfig cfg;
  cfg.seq_length = 12;
  std::string prompt = "The history of the river and the city of Paris in France is a long story.";
  std::string completion = "Yes.";
  auto p = enc(prompt), c = enc(completion);
  ASSERT_GT(int64_t(p.size() + c.size() + 2), 13);
  bool truncated = false;
  SftExample right = tokenize_sft_example(prompt, completion, tok(), cfg, &truncated);
  EXPECT_TRUE(truncated);
  ASSERT_EQ(right.text.size(), 13u);
  const size_t keep = 13 - 2 - c.size();
  EXPECT_EQ(right.prompt_len, int64_t(1 + keep));
  EXPECT_EQ(std::vector<int32_t>(right.text.begin() + 1, right.text.begin() + 1 + long(keep)),
            std::vector<int32_t>(p.begin(), p.begin() + long(keep)));  // the prompt's beginning
  EXPECT_EQ(std::vector<int32_t>(right.text.end() - 1 - long(c.size()), right.text.end() - 1), c);
  EXPECT_EQ(right.text.back(), 2);
  cfg.truncate_prompt_left = true;
  SftExample left = tokenize_sft_example(prompt, completion, tok(), cfg, &truncated);
  EXPECT_EQ(std::vector<int32_t>(left.text.begin() + 1, left.text.begin() + 1 + long(keep)),
            std::vector<int32_t>(p.end() - long(keep), p.end()));  // the prompt's end
  // A completion longer than the window is cut too; the EOS stays.
  cfg.seq_length = 4;
  SftExample tiny = tokenize_sft_example(prompt, "The city of Paris is in France.", tok(), cfg, &truncated);
  EXPECT_TRUE(truncated);
  EXPECT_EQ(tiny.text.size(), 5u);
  EXPECT_EQ(tiny.prompt_len, 1);
  EXPECT_EQ(tiny.text.back(), 2);
}

TEST(SftLoad, CountsMalformedTruncatedAndBlankRows) {
  std::string long_q(400, 'a');
  std::string body;
  body += R"({"question": "Is water wet?", "sentence": "Water is a liquid.", "label": "entailment"})"
          "\n";  // 1 ok
  body += "\n";  // 2 blank
  body += R"({"question": "Q", "sentence": "S", "label": "entailment")"
          "\n";  // 3 invalid JSON
  body += R"({"question": "Q", "label": "entailment"})"
          "\n";                                                                                       // 4 missing key
  body += "{\"question\": \"bad \xff\xfe utf8\", \"sentence\": \"S\", \"label\": \"entailment\"}\n";  // 5 invalid UTF-8
  body += R"({"question": "Q", "sentence": "S", "label": "unknown"})"
          "\n";  // 6 not in map
  body += R"({"question": ")" + long_q +
          R"(", "sentence": "S", "label": "not_entailment"})"
          "\r\n";                                                                         // 7 ok, truncated
  body += R"({"question": "Who?", "sentence": "The king.", "label": "not_entailment"})";  // 8 ok, no newline
  fs::path path = write_temp("load.jsonl", body);
  SftConfig cfg = qnli_config(64);
  cfg.max_reported = 3;
  SftStats st;
  auto ex = load_sft_jsonl(path.string(), tok(), cfg, &st);
  EXPECT_EQ(st.lines, 8);
  EXPECT_EQ(st.blank, 1);
  EXPECT_EQ(st.examples, 3);
  EXPECT_EQ(ex.size(), 3u);
  EXPECT_EQ(st.malformed, 4);
  EXPECT_EQ(st.truncated, 1);
  EXPECT_EQ(st.reasons["invalid JSON"], 2);  // line 3 and the invalid UTF-8 of line 5
  EXPECT_EQ(st.reasons["missing key \"sentence\""], 1);
  EXPECT_EQ(st.reasons["\"label\" value not in the completion map"], 1);
  ASSERT_EQ(st.locations.size(), 3u);
  EXPECT_EQ(st.locations[0], path.string() + ":3: invalid JSON");
  EXPECT_EQ(st.locations[1], path.string() + ":4: missing key \"sentence\"");
  EXPECT_EQ(st.locations[2], path.string() + ":5: invalid JSON");
  for (const auto& e : ex) EXPECT_LE(e.text.size(), 65u);
  EXPECT_EQ(ex[1].text.size(), 65u);  // the 400-character question, cut to the window
  EXPECT_NE(format_sft_stats(st).find("4 malformed, 1 truncated"), std::string::npos);
  EXPECT_THROW(load_sft_jsonl((path.string() + ".missing"), tok(), cfg, &st), Error);
  // An empty completion is a malformed row, not a silent zero-loss sample.
  fs::path p2 = write_temp("empty.jsonl", R"({"input": "Q", "output": ""})"
                                          "\n");
  SftConfig plain;
  plain.seq_length = 16;
  SftStats st2;
  EXPECT_TRUE(load_sft_jsonl(p2.string(), tok(), plain, &st2).empty());
  EXPECT_EQ(st2.reasons["empty completion"], 1);
  fs::remove(path);
  fs::remove(p2);
}

TEST(SftSamples, PackingKeepsMasksPerExample) {
  SftConfig cfg;
  cfg.seq_length = 40;
  cfg.pack = true;
  cfg.pad_id = 3;
  std::vector<SftExample> exs;
  bool tr;
  const char* rows[][2] = {{"What is water?", "A liquid."},
                           {"Who was king?", "Louis."},
                           {"Where is Paris?", "In France, on the river."},
                           {"When?", "In 1999."},
                           {"Which book?", "The history book about the music of the east."}};
  for (auto& r : rows) exs.push_back(tokenize_sft_example(r[0], r[1], tok(), cfg, &tr));
  auto groups = pack_sft_examples(exs, 41);
  // Every example once, every group within the capacity.
  std::vector<int> seen(exs.size(), 0);
  for (const auto& g : groups) {
    int64_t used = 0;
    for (int64_t e : g) {
      seen[size_t(e)]++;
      used += int64_t(exs[size_t(e)].text.size());
    }
    EXPECT_LE(used, 41);
  }
  EXPECT_EQ(seen, std::vector<int>(exs.size(), 1));
  ASSERT_LT(groups.size(), exs.size());  // at least one pack holds two examples

  for (const auto& g : groups) {
    std::vector<const SftExample*> members;
    int64_t targets = 0, n = 0;
    for (int64_t e : g) {
      members.push_back(&exs[size_t(e)]);
      targets += int64_t(exs[size_t(e)].text.size()) - exs[size_t(e)].prompt_len;
    }
    GptSample s;
    make_sft_sample(&s, members, cfg);
    EXPECT_EQ(std::accumulate(s.loss_mask.begin(), s.loss_mask.end(), 0.0f), float(targets));
    // Walk the examples: positions and documents restart, the EOS -> next BOS label is not trained.
    int64_t t = 0;
    for (const SftExample* ex : members) {
      const int64_t start = t;
      for (int64_t k = 0; k < int64_t(ex->text.size()); k++, t++) {
        if (t >= 40) break;
        EXPECT_EQ(s.tokens[size_t(t)], ex->text[size_t(k)]);
        EXPECT_EQ(s.position_ids[size_t(t)], k);
        EXPECT_EQ(s.doc_start[size_t(t)], start) << "token " << t;
        if (k + 1 < int64_t(ex->text.size())) {
          EXPECT_EQ(s.loss_mask[size_t(t)], k + 1 >= ex->prompt_len ? 1.0f : 0.0f);
        } else if (t + 1 < 40) {
          EXPECT_EQ(s.loss_mask[size_t(t)], 0.0f);  // label is the next example's BOS (or padding)
        }
      }
      n += int64_t(ex->text.size());
    }
    for (int64_t k = n; k < 40; k++) {
      EXPECT_EQ(s.tokens[size_t(k)], 3);
      EXPECT_EQ(s.labels[size_t(k)], kIgnoreLabel);
      EXPECT_EQ(s.doc_start[size_t(k)], n) << "padding is a document of its own, token " << k;
    }
  }
}

TEST(SftDataset, EpochOrderIsSeededAndCoversEveryExample) {
  SftConfig cfg;
  cfg.seq_length = 24;
  std::vector<SftExample> exs;
  bool tr;
  for (int i = 0; i < 20; i++)
    exs.push_back(
        tokenize_sft_example("Question " + std::to_string(i), "Answer " + std::to_string(i), tok(), cfg, &tr));
  SftDataset a(exs, cfg, 1234, true), b(exs, cfg, 1234, true), plain(exs, cfg, 1234, false);
  ASSERT_EQ(a.size(), 20);
  auto first_token_after_bos = [](const GptSample& s) {
    return std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + 6);
  };
  GptSample x, y;
  std::set<std::vector<int32_t>> epoch0, epoch1;
  std::vector<std::vector<int32_t>> order0, order1;
  for (int64_t i = 0; i < 40; i++) {
    a.get(i, &x);
    b.get(i, &y);
    EXPECT_EQ(x.tokens, y.tokens);  // same seed, same sample
    (i < 20 ? epoch0 : epoch1).insert(x.tokens);
    (i < 20 ? order0 : order1).push_back(first_token_after_bos(x));
  }
  EXPECT_EQ(epoch0.size(), 20u);  // every example once per epoch
  EXPECT_EQ(epoch1, epoch0);
  EXPECT_NE(order0, order1);  // a fresh order each epoch
  for (int64_t i = 0; i < 20; i++) {
    plain.get(i, &x);
    GptSample z;
    make_sft_sample(&z, {&exs[size_t(i)]}, cfg);
    EXPECT_EQ(x.tokens, z.tokens);
  }
  EXPECT_THROW(SftDataset({}, cfg, 1, true), Error);
}

TEST(SftSamples, FirstFitDecreasingPacksTighterThanInOrderAndIsAFunctionOfTheSeed) {
  // Lengths 2..60 at capacity 64: in order, a long example after a half-full group opens a new one;
  // first-fit decreasing fills the gaps with the short ones. Every example is in one group, every group
  // fits, the packing is the same for the same seed, and windows keep the work bounded.
  std::vector<SftExample> exs(500);
  uint32_t x = 12345;
  for (auto& e : exs) {
    x = x * 1664525u + 1013904223u;
    e.text.assign(2 + (x >> 8) % 59, 7);
  }
  auto in_order = [&] {  // the greedy packer it replaces, for the comparison
    std::vector<std::vector<int64_t>> g;
    int64_t used = 65;
    for (int64_t i = 0; i < int64_t(exs.size()); i++) {
      if (used + int64_t(exs[size_t(i)].text.size()) > 64) g.emplace_back(), used = 0;
      g.back().push_back(i);
      used += int64_t(exs[size_t(i)].text.size());
    }
    return g;
  }();
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffled" : "in order");
    const auto ffd = pack_sft_examples(exs, 64, 9, shuffle, 128);
    std::vector<int> seen(exs.size(), 0);
    for (const auto& g : ffd) {
      int64_t used = 0;
      for (int64_t e : g) seen[size_t(e)]++, used += int64_t(exs[size_t(e)].text.size());
      EXPECT_LE(used, 64);
    }
    EXPECT_EQ(seen, std::vector<int>(exs.size(), 1));
    EXPECT_LT(double(ffd.size()), 0.9 * double(in_order.size())) << ffd.size() << " groups against " << in_order.size();
    EXPECT_EQ(ffd, pack_sft_examples(exs, 64, 9, shuffle, 128));
  }
  EXPECT_NE(pack_sft_examples(exs, 64, 9, true, 128), pack_sft_examples(exs, 64, 10, true, 128));
}

TEST(ByteOrderMark, IsNoTextForTheSftLoaderAndTheTokenizerTrainer) {
  // A UTF-8 BOM at the start of a file is skipped and said, never a lost or altered first row: the SFT
  // loader and the tokenizer trainer's document reader (JSONL and text) read the same as without.
  const std::string dir = (fs::temp_directory_path() / ("bom_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  const std::string rows =
      "{\"input\": \"Is 2 even?\", \"output\": \"yes\"}\n{\"input\": \"Is 3 even?\", \"output\": \"no\"}\n";
  const std::string bom = "\xEF\xBB\xBF";
  std::ofstream(dir + "/plain.jsonl") << rows;
  std::ofstream(dir + "/bom.jsonl") << bom + rows;
  std::ofstream(dir + "/plain.txt") << "first line\nsecond line\n";
  std::ofstream(dir + "/bom.txt") << bom + "first line\nsecond line\n";
  SftConfig cfg;
  cfg.seq_length = 32;
  SftStats plain_stats, bom_stats;
  const auto plain = load_sft_jsonl(dir + "/plain.jsonl", tok(), cfg, &plain_stats);
  const auto with_bom = load_sft_jsonl(dir + "/bom.jsonl", tok(), cfg, &bom_stats);
  ASSERT_EQ(with_bom.size(), 2u) << format_sft_stats(bom_stats);
  EXPECT_EQ(with_bom[0].text, plain[0].text);
  EXPECT_EQ(bom_stats.malformed, 0);
  EXPECT_TRUE(bom_stats.byte_order_mark);
  EXPECT_FALSE(plain_stats.byte_order_mark);
  EXPECT_NE(format_sft_stats(bom_stats).find("byte-order mark"), std::string::npos);
  for (const char* ext : {".jsonl", ".txt"}) {
    SCOPED_TRACE(ext);
    TokenizerTrainOptions o;
    o.json_keys = {"input"};
    int64_t skipped_plain = 0, skipped_bom = 0;
    o.inputs = {dir + "/plain" + ext};
    const auto docs_plain = read_documents(o, &skipped_plain);
    o.inputs = {dir + "/bom" + ext};
    const auto docs_bom = read_documents(o, &skipped_bom);
    EXPECT_EQ(docs_bom, docs_plain);
    EXPECT_EQ(skipped_bom, skipped_plain);
    EXPECT_EQ(docs_bom.size(), 2u);
  }
  fs::remove_all(dir);
}
