// HF config.json reading/writing and LlamaConfig presets: the published Llama-2-7B config, 4.x
// defaults, the newer spellings (rope_parameters, dtype), each kind of bad or unsupported config
// (the Error names the file and the key), write/read round trips, and parameter counts checked
// against the published totals (Llama-2-7B/13B, TinyLlama).
#include "io/hf_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "model/config.h"

namespace llamatrain::io {
namespace {

namespace fs = std::filesystem;
using model::LlamaConfig;
using nlohmann::json;

#define EXPECT_HAS(msg, sub) \
  EXPECT_NE((msg).find(sub), std::string::npos) << "missing \"" << (sub) << "\" in: " << (msg)

// The config.json published with meta-llama/Llama-2-7b-hf (transformers 4.31).
const char* kLlama2_7b = R"({
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.31.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

void expect_same(const LlamaConfig& a, const LlamaConfig& b) {
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.ffn_dim, b.ffn_dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.bos_id, b.bos_id);
  EXPECT_EQ(a.eos_id, b.eos_id);
}

class HfConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "hfcfg_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& text, const std::string& name = "config.json") {
    std::string p = (fs::path(dir_) / name).string();
    std::ofstream(p) << text;
    return p;
  }
  // kLlama2_7b with `patch` merged in (null values remove the key).
  std::string patched(const json& patch) {
    json j = json::parse(kLlama2_7b);
    j.merge_patch(patch);
    return write(j.dump(2));
  }
  std::string error_of(const std::string& file) {
    try {
      read_hf_config(file);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_HAS(msg, file);
      EXPECT_HAS(msg, "hint:");
      return msg;
    }
    ADD_FAILURE() << "reading " << file << " succeeded, expected an Error";
    return "";
  }
  std::string dir_;
};

TEST_F(HfConfigTest, ReadsLlama2_7bConfig) {
  LlamaConfig c = read_hf_config(write(kLlama2_7b));
  expect_same(c, model::preset_config("llama2-7b"));
  EXPECT_EQ(c.num_params(), 6738415616);
  // A folder holding config.json works too.
  expect_same(read_hf_config(dir_), c);
}

TEST_F(HfConfigTest, MissingOptionalKeysTakeHfDefaults) {
  LlamaConfig c = read_hf_config(write(
      R"({"hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000})"));
  EXPECT_EQ(c.dim, 256);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.max_seq_len, 2048);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  // Explicit nulls behave like missing keys.
  LlamaConfig n = read_hf_config(patched({{"num_key_value_heads", json()}}));
  EXPECT_EQ(n.n_kv_heads, 32);
}

TEST_F(HfConfigTest, AcceptsNewSpellings) {
  LlamaConfig c = read_hf_config(patched({{"torch_dtype", json()},
                                          {"rope_scaling", json()},
                                          {"dtype", "bfloat16"},
                                          {"num_key_value_heads", 8},
                                          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 500000.0}}},
                                          {"bos_token_id", 0},
                                          {"head_dim", 128},
                                          {"attention_bias", false},
                                          {"mlp_bias", false}}));
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.bos_id, 0);
}

TEST_F(HfConfigTest, TokenIdListUsesTheFirst) {
  json j = json::parse(kLlama2_7b);
  j["vocab_size"] = 128256;
  j["eos_token_id"] = {128001, 128009};
  LlamaConfig c = read_hf_config(write(j.dump()));
  EXPECT_EQ(c.eos_id, 128001);
  j["eos_token_id"] = json::array();
  EXPECT_HAS(error_of(write(j.dump())), "eos_token_id");
}

TEST_F(HfConfigTest, RopeThetaLegacyAndNewMustAgree) {
  EXPECT_EQ(read_hf_config(patched({{"rope_theta", 500000.0}})).rope_theta, 500000.0f);
  std::string msg = error_of(patched({{"rope_theta", 10000.0}, {"rope_parameters", {{"rope_theta", 500000.0}}}}));
  EXPECT_HAS(msg, "rope_theta");
}

TEST_F(HfConfigTest, MissingRequiredKey) {
  for (const char* key :
       {"hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size"}) {
    std::string msg = error_of(patched({{key, json()}}));
    EXPECT_HAS(msg, std::string("\"") + key + "\" is missing");
  }
}

TEST_F(HfConfigTest, WrongJsonTypes) {
  std::string msg = error_of(patched({{"hidden_size", "4096"}}));
  EXPECT_HAS(msg, "\"hidden_size\"");
  EXPECT_HAS(msg, "type string");
  EXPECT_HAS(msg, "expected integer");
  msg = error_of(patched({{"num_hidden_layers", 32.0}}));
  EXPECT_HAS(msg, "type float");
  msg = error_of(patched({{"tie_word_embeddings", 0}}));
  EXPECT_HAS(msg, "\"tie_word_embeddings\"");
  EXPECT_HAS(msg, "expected boolean");
  msg = error_of(patched({{"rms_norm_eps", "1e-5"}}));
  EXPECT_HAS(msg, "expected number");
  msg = error_of(patched({{"vocab_size", 1e12}}));
  EXPECT_HAS(msg, "\"vocab_size\"");
  msg = error_of(patched({{"vocab_size", 100000000000}}));
  EXPECT_HAS(msg, "32 bits");
  msg = error_of(patched({{"model_type", 7}}));
  EXPECT_HAS(msg, "expected string");
  msg = error_of(patched({{"rope_parameters", "default"}}));
  EXPECT_HAS(msg, "expected object");
}

TEST_F(HfConfigTest, NotJsonOrNotAnObject) {
  EXPECT_HAS(error_of(write("{\"hidden_size\": ")), "not valid JSON");
  EXPECT_HAS(error_of(write("[1, 2]")), "expected an object");
  EXPECT_THROW(read_hf_config((fs::path(dir_) / "nothing.json").string()), Error);
  // nlohmann would stop at a NUL and accept the prefix; the reader must not.
  EXPECT_HAS(error_of(write(std::string(kLlama2_7b) + std::string("\0garbage", 8))), "NUL byte");
  fs::create_directories(fs::path(dir_) / "empty");
  EXPECT_THROW(read_hf_config((fs::path(dir_) / "empty").string()), Error);
}

TEST_F(HfConfigTest, HeadsNotDividingHiddenSize) {
  std::string msg = error_of(patched({{"num_attention_heads", 30}, {"num_key_value_heads", 30}}));
  EXPECT_HAS(msg, "n_heads: got 30, expected a divisor of dim 4096");
}

TEST_F(HfConfigTest, KvHeadsNotDividingHeads) {
  std::string msg = error_of(patched({{"num_key_value_heads", 5}}));
  EXPECT_HAS(msg, "n_kv_heads: got 5, expected a divisor of n_heads 32");
}

TEST_F(HfConfigTest, UnsupportedFeaturesAreRefusedByName) {
  std::string msg = error_of(patched({{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}));
  EXPECT_HAS(msg, "rope_scaling");
  EXPECT_HAS(msg, "does not support");
  EXPECT_HAS(msg, "\"llama3\"");  // what is supported
  EXPECT_HAS(error_of(patched({{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}}})), "\"yarn\"");
  // llama3 without its parameters names the missing one.
  EXPECT_HAS(error_of(patched({{"rope_parameters", {{"rope_type", "llama3"}, {"factor", 8.0}}}})), "low_freq_factor");
  EXPECT_HAS(error_of(patched({{"rope_scaling",
                                {{"rope_type", "llama3"},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 4.0},
                                 {"high_freq_factor", 1.0},
                                 {"original_max_position_embeddings", 8192}}}})),
             "low < high");
  EXPECT_HAS(error_of(patched({{"rope_scaling",
                                {{"rope_type", "llama3"},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8192}}},
                               {"rope_parameters", {{"rope_type", "default"}}}})),
             "different");
  EXPECT_HAS(error_of(patched({{"head_dim", 63}})), "head_dim");
  EXPECT_HAS(error_of(patched({{"hidden_act", "gelu"}})), "\"gelu\"");
  EXPECT_HAS(error_of(patched({{"attention_bias", true}})), "attention_bias");
  EXPECT_HAS(error_of(patched({{"mlp_bias", true}})), "mlp_bias");
  msg = error_of(patched({{"model_type", "baichuan"}}));
  EXPECT_HAS(msg, "\"baichuan\"");
  EXPECT_HAS(msg, "\"qwen2\"");
  EXPECT_HAS(error_of(patched({{"model_type", "qwen2"}, {"use_sliding_window", true}})), "use_sliding_window");
  EXPECT_HAS(error_of(patched({{"sliding_window", 4096}})), "sliding_window");  // only Mistral's
  EXPECT_HAS(error_of(patched({{"model_type", "mistral"}, {"sliding_window", 0}})), "sliding_window");
  EXPECT_NO_THROW(read_hf_config(patched({{"model_type", "mistral"}, {"sliding_window", json()}})));
}

// The published config.json of each supported family (values as on the Hugging Face hub), read
// into the fields that differ, with parameter counts equal to the published totals.
TEST_F(HfConfigTest, ReadsEachFamilysPublishedConfig) {
  json llama31 = json::parse(kLlama2_7b);
  llama31.merge_patch({{"attention_bias", false},
                       {"bos_token_id", 128000},
                       {"eos_token_id", {128001, 128008, 128009}},
                       {"intermediate_size", 14336},
                       {"max_position_embeddings", 131072},
                       {"mlp_bias", false},
                       {"num_key_value_heads", 8},
                       {"rope_scaling",
                        {{"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192},
                         {"rope_type", "llama3"}}},
                       {"rope_theta", 500000.0},
                       {"torch_dtype", "bfloat16"},
                       {"vocab_size", 128256}});
  LlamaConfig c = read_hf_config(write(llama31.dump()));  // Llama-3.1-8B-Instruct
  EXPECT_EQ(c.family, model::Family::llama);
  EXPECT_EQ(c.num_params(), 8030261248);
  EXPECT_EQ(c.bos_id, 128000);
  EXPECT_EQ(c.eos_id, 128001);
  EXPECT_EQ(c.extra_eos_ids, (std::vector<int>{128008, 128009}));
  EXPECT_EQ(c.rope_scaling.type, model::RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_pos, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_FALSE(c.qkv_bias);
  // transformers v5 spelling: rope_parameters holds the theta and the scaling.
  json v5 = llama31;
  v5.erase("rope_theta");
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  v5.erase("rope_scaling");
  LlamaConfig c5 = read_hf_config(write(v5.dump()));
  EXPECT_EQ(c5.rope_scaling.type, model::RopeScaling::Type::llama3);
  EXPECT_EQ(c5.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c5.rope_theta, 500000.0f);

  // Llama-3.2-1B: tied, explicit head_dim equal to hidden / heads.
  json llama32 = llama31;
  llama32.merge_patch({{"hidden_size", 2048},
                       {"intermediate_size", 8192},
                       {"num_hidden_layers", 16},
                       {"head_dim", 64},
                       {"tie_word_embeddings", true},
                       {"eos_token_id", 128001}});
  llama32["rope_scaling"]["factor"] = 32.0;
  c = read_hf_config(write(llama32.dump()));
  EXPECT_EQ(c.num_params(), 1235814400);
  EXPECT_EQ(c.head_size, 0);
  EXPECT_TRUE(c.extra_eos_ids.empty());

  const char* qwen25_7b = R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 152064})";
  c = read_hf_config(write(qwen25_7b));
  EXPECT_EQ(c.family, model::Family::qwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window false
  EXPECT_EQ(c.num_params(), 7615616512);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  // Qwen2.5-0.5B: tied; a config without bos_token_id has no BOS.
  json qwen05 = json::parse(qwen25_7b);
  qwen05.merge_patch({{"hidden_size", 896},
                      {"intermediate_size", 4864},
                      {"num_attention_heads", 14},
                      {"num_hidden_layers", 24},
                      {"num_key_value_heads", 2},
                      {"tie_word_embeddings", true},
                      {"vocab_size", 151936},
                      {"bos_token_id", json()}});
  c = read_hf_config(write(qwen05.dump()));
  EXPECT_EQ(c.num_params(), 494032768);
  EXPECT_EQ(c.bos_id, -1);

  json mistral = json::parse(kLlama2_7b);
  mistral.merge_patch({{"architectures", {"MistralForCausalLM"}},
                       {"model_type", "mistral"},
                       {"intermediate_size", 14336},
                       {"max_position_embeddings", 32768},
                       {"num_key_value_heads", 8},
                       {"sliding_window", 4096},
                       {"rope_theta", 10000.0},
                       {"pretraining_tp", json()}});
  c = read_hf_config(write(mistral.dump()));  // Mistral-7B-v0.1
  EXPECT_EQ(c.family, model::Family::mistral);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.num_params(), 7241732096);
  // Mistral-Nemo: head_dim 128 with hidden 5120 / 32 heads.
  mistral.merge_patch({{"hidden_size", 5120},
                       {"num_hidden_layers", 40},
                       {"head_dim", 128},
                       {"vocab_size", 131072},
                       {"sliding_window", json()},
                       {"rope_theta", 1000000.0}});
  c = read_hf_config(write(mistral.dump()));
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.head_size, 128);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.num_params(), 12247782400);
}

// Each family's fields survive write + read, with that family's architecture and keys.
TEST_F(HfConfigTest, WriteReadRoundTripForEachFamily) {
  LlamaConfig base = model::preset_config("tiny");
  LlamaConfig qwen = base, llama3 = base, mistral = base;
  qwen.family = model::Family::qwen2;
  qwen.qkv_bias = true;
  qwen.bos_id = -1;
  qwen.tie_embeddings = true;
  llama3.rope_scaling = {model::RopeScaling::Type::llama3, 8.0f, 1.0f, 4.0f, 64};
  llama3.head_size = 32;
  llama3.extra_eos_ids = {5, 7};
  mistral.family = model::Family::mistral;
  mistral.sliding_window = 16;
  for (const LlamaConfig* c : {&qwen, &llama3, &mistral}) {
    write_hf_config(dir_, *c, "bfloat16");
    const LlamaConfig r = read_hf_config(dir_);
    SCOPED_TRACE(model::family_name(c->family));
    expect_same(r, *c);
    EXPECT_EQ(r.family, c->family);
    EXPECT_EQ(r.qkv_bias, c->qkv_bias);
    EXPECT_EQ(r.head_dim(), c->head_dim());
    EXPECT_EQ(r.head_size, c->head_size);
    EXPECT_EQ(r.sliding_window, c->sliding_window);
    EXPECT_EQ(r.extra_eos_ids, c->extra_eos_ids);
    EXPECT_EQ(r.rope_scaling.type, c->rope_scaling.type);
    EXPECT_EQ(r.rope_scaling.factor, c->rope_scaling.factor);
    EXPECT_EQ(r.rope_scaling.original_max_pos, c->rope_scaling.original_max_pos);
    std::stringstream ss;
    ss << std::ifstream(fs::path(dir_) / "config.json").rdbuf();
    const json j = json::parse(ss.str());
    EXPECT_EQ(j["model_type"], model::family_name(c->family));
  }
  std::stringstream ss;
  write_hf_config(dir_, qwen, "bfloat16");
  ss << std::ifstream(fs::path(dir_) / "config.json").rdbuf();
  const json q = json::parse(ss.str());
  EXPECT_EQ(q["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_TRUE(q["bos_token_id"].is_null());
  EXPECT_EQ(q["use_sliding_window"], false);
  EXPECT_FALSE(q.contains("attention_bias"));  // Llama's key would put a bias on o_proj too
}

TEST_F(HfConfigTest, OutOfRangeValues) {
  EXPECT_HAS(error_of(patched({{"rms_norm_eps", 0}})), "norm_eps");
  EXPECT_HAS(error_of(patched({{"rope_theta", -1.0}})), "rope_theta");
  EXPECT_HAS(error_of(patched({{"hidden_size", -4096}})), "dim");
  EXPECT_HAS(error_of(patched({{"num_hidden_layers", 0}})), "n_layers");
  EXPECT_HAS(error_of(patched({{"bos_token_id", 32000}})), "bos_id");
}

TEST_F(HfConfigTest, WriteReadRoundTripForEveryPreset) {
  for (const char* name :
       {"stories15m", "stories42m", "stories110m", "tinyllama-1.1b", "llama2-7b", "llama2-13b", "tiny"}) {
    LlamaConfig c = model::preset_config(name);
    c.rope_theta = 500000.0f;
    write_hf_config(dir_, c, "bfloat16");
    SCOPED_TRACE(name);
    expect_same(read_hf_config(dir_), c);
  }
  LlamaConfig c = model::preset_config("llama2-7b");
  std::string file = (fs::path(dir_) / "out.json").string();
  write_hf_config(file, c, "float16");
  std::stringstream ss;
  ss << std::ifstream(file).rdbuf();
  const std::string text = ss.str();
  // 4.x keys, sorted, indented by 2, trailing newline, floats in their short form.
  EXPECT_EQ(text.substr(0, 20), "{\n  \"architectures\":");
  EXPECT_EQ(text.back(), '\n');
  EXPECT_HAS(text, "\n  \"rms_norm_eps\": 1e-05,\n");
  EXPECT_HAS(text, "\n  \"rope_scaling\": null,\n  \"rope_theta\": 10000.0,\n");
  EXPECT_HAS(text, "\"torch_dtype\": \"float16\"");
  EXPECT_HAS(text, "\"model_type\": \"llama\"");
  json j = json::parse(text);
  std::string prev;
  for (auto it = j.begin(); it != j.end(); ++it) {
    EXPECT_LT(prev, it.key());
    prev = it.key();
  }
  EXPECT_LT(text.find("\"hidden_size\""), text.find("\"vocab_size\""));
  EXPECT_THROW(write_hf_config(file, c, "float8"), Error);
}

// ---- LlamaConfig ----

TEST(LlamaConfigTest, PresetsValidateAndCountParameters) {
  // Published totals: Llama-2-7B 6,738,415,616; Llama-2-13B 13,015,864,320; TinyLlama 1,100,048,384.
  EXPECT_EQ(model::preset_config("llama2-7b").num_params(), 6738415616);
  EXPECT_EQ(model::preset_config("llama2-13b").num_params(), 13015864320);
  EXPECT_EQ(model::preset_config("tinyllama-1.1b").num_params(), 1100048384);
  // stories15m: tied embedding, 32000*288 + 6*(4*288*288 + 3*768*288 + 2*288) + 288.
  EXPECT_EQ(model::preset_config("stories15m").num_params(), 15191712);
  LlamaConfig tiny = model::preset_config("tiny");
  EXPECT_EQ(tiny.dim, 64);
  EXPECT_EQ(tiny.n_kv_heads, 2);
  EXPECT_EQ(tiny.head_dim(), 16);
  EXPECT_EQ(tiny.qkv_dim(), 128);
  // Untied: 2*V*C + L*((H+2Hkv)*D*C + H*D*C + 3*F*C + 2C) + C
  EXPECT_EQ(tiny.num_params(), 2 * 256 * 64 + 2 * (8 * 16 * 64 + 4 * 16 * 64 + 3 * 176 * 64 + 128) + 64);
  LlamaConfig tied = tiny;
  tied.tie_embeddings = true;
  EXPECT_EQ(tiny.num_params() - tied.num_params(), 256 * 64);
  LlamaConfig tl = model::preset_config("tinyllama-1.1b");
  EXPECT_EQ(tl.n_kv_heads, 4);
  EXPECT_EQ(tl.norm_eps, 1e-5f);
}

TEST(LlamaConfigTest, UnknownPresetListsKnownNames) {
  try {
    model::preset_config("llama2-8b");
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_HAS(msg, "llama2-8b");
    for (const char* n :
         {"stories15m", "stories42m", "stories110m", "tinyllama-1.1b", "llama2-7b", "llama2-13b", "tiny"})
      EXPECT_HAS(msg, n);
  }
}

TEST(LlamaConfigTest, ValidateRejectsEachInconsistency) {
  auto error_of = [](const LlamaConfig& c) {
    try {
      c.validate("test");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LlamaConfig base = model::preset_config("tiny");
  EXPECT_EQ(error_of(base), "no error");
  LlamaConfig c = base;
  c.dim = 0;
  EXPECT_HAS(error_of(c), "config test: dim is 0");
  c = base;
  c.n_heads = 3;
  EXPECT_HAS(error_of(c), "config test: n_heads: got 3, expected a divisor of dim 64");
  c = base;
  c.n_kv_heads = 3;
  EXPECT_HAS(error_of(c), "config test: n_kv_heads: got 3, expected a divisor of n_heads 4");
  c = base;
  c.n_kv_heads = 8;
  EXPECT_HAS(error_of(c), "n_kv_heads is 8");
  c = base;
  c.dim = 48;
  c.n_heads = 16;
  c.n_kv_heads = 16;
  EXPECT_HAS(error_of(c), "n_heads: gives head dim 3 (dim 48 / 16), expected an even head dim");
  c = base;
  c.norm_eps = 0;
  EXPECT_HAS(error_of(c), "norm_eps");
  c = base;
  c.rope_theta = -1;
  EXPECT_HAS(error_of(c), "rope_theta");
  c = base;
  c.vocab_size = -5;
  EXPECT_HAS(error_of(c), "vocab_size");
  c = base;
  c.eos_id = 256;
  EXPECT_HAS(error_of(c), "eos_id");
  c = base;
  c.ffn_dim = 1 << 30;
  EXPECT_HAS(error_of(c), "ffn_dim");
}

}  // namespace
}  // namespace llamatrain::io
