// Hugging Face checkpoints of the Llama family's variants (io/hf_checkpoint.h, io/hf_export.h): the
// q/k/v biases as rows of "bqkv" in wqkv's order, an explicit head_dim in the slice shapes, tensors
// the architecture does not have refused by name with their file (W_pack, o_proj and MLP biases,
// q/k/v biases the config does not declare), a tied model's lm_head.weight accepted only as an exact
// copy, the tokenizer files an export takes (tokenizer.json copied byte for byte), generation_config.json
// with eos lists and no BOS, and the tiny Qwen2 / Llama 3 folders of tools/reference/make_tiny_hf.py
// through load -> export with byte-identical tensors and the same config.json keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "io/hf_export.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/llama.h"
#include "test_util.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

const std::string kTinyHf = testing::source_path("tests/golden/tiny_hf");
const std::string kQwen2 = testing::source_path("tests/golden/tiny_qwen2");
const std::string kLlama3 = testing::source_path("tests/golden/tiny_llama3");

// Qwen2's shape at test size: C 64, H 4, Hkv 2, D 16, biases on q/k/v, tied.
model::LlamaConfig qwen2_like() {
  model::LlamaConfig c = model::preset_config("tiny");
  c.dim = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.n_layers = 2;
  c.vocab_size = 512;
  c.family = model::Family::qwen2;
  c.qkv_bias = true;
  c.tie_embeddings = true;
  return c;
}

const io::HfTensorSlice& slice(const std::vector<io::HfTensorSlice>& all, const std::string& name) {
  auto it = std::find_if(all.begin(), all.end(), [&](const io::HfTensorSlice& t) { return t.hf_name == name; });
  if (it == all.end()) throw std::runtime_error("no slice " + name);
  return *it;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

TEST(HfCheckpoint, BiasesAreOneColumnRowsOfBqkvInWqkvsOrder) {
  const model::LlamaConfig c = qwen2_like();
  const int64_t D = c.head_dim(), QKV = c.qkv_dim();
  ASSERT_EQ(QKV, (4 + 2 * 2) * 16);
  const auto all = io::hf_tensor_slices(c);
  std::vector<int> covered(size_t(c.n_layers * QKV), 0);
  for (int l = 0; l < c.n_layers; l++) {
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn." + proj;
      const auto& b = slice(all, p + ".bias");
      const auto& w = slice(all, p + ".weight");
      EXPECT_EQ(b.param, "bqkv");
      EXPECT_EQ(b.layer, l);
      EXPECT_EQ(b.cols, 1);
      EXPECT_EQ(b.row_begin, w.row_begin) << p << ": a bias row must sit at its weight row";
      EXPECT_EQ(b.rows, w.rows);
      EXPECT_EQ(b.shape, (std::vector<int64_t>{w.rows}));
      EXPECT_EQ(b.element, l * QKV + b.row_begin);
      for (int64_t i = 0; i < b.rows; i++) covered[size_t(b.element + i)]++;
    }
  }
  EXPECT_EQ(slice(all, "model.layers.1.self_attn.k_proj.bias").rows, 2 * D);
  EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }))
      << "the biases must cover (L, QKV) exactly once";
  EXPECT_EQ(io::hf_names_of(c, "bqkv"), "model.layers.*.self_attn.q_proj.bias, model.layers.*.self_attn.k_proj.bias, "
                                        "model.layers.*.self_attn.v_proj.bias");
  // tied: no lm_head.weight; without biases: no bias names at all
  EXPECT_TRUE(std::none_of(all.begin(), all.end(), [](const auto& t) { return t.hf_name == "lm_head.weight"; }));
  model::LlamaConfig plain = c;
  plain.qkv_bias = false;
  for (const auto& t : io::hf_tensor_slices(plain)) EXPECT_EQ(t.hf_name.find(".bias"), std::string::npos) << t.hf_name;
}

TEST(HfCheckpoint, AnExplicitHeadDimShapesTheAttentionTensors) {
  model::LlamaConfig c = qwen2_like();
  c.head_size = 32;  // not 64 / 4
  const auto all = io::hf_tensor_slices(c);
  EXPECT_EQ(slice(all, "model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(slice(all, "model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(slice(all, "model.layers.0.self_attn.o_proj.weight").shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(slice(all, "model.layers.1.self_attn.v_proj.bias").element, 256 + 128 + 64);
}

TEST(HfCheckpoint, FreezingTheBiasesGoesByTheirHfNames) {
  const model::LlamaConfig c = qwen2_like();
  auto frozen = io::resolve_freeze(c, {"model.layers.*.self_attn.*"}).tensors;
  EXPECT_NE(std::find(frozen.begin(), frozen.end(), "bqkv"), frozen.end());
  EXPECT_NE(std::find(frozen.begin(), frozen.end(), "wqkv"), frozen.end());
  frozen = io::resolve_freeze(c, {"model.layers.*.self_attn.*.weight"}).tensors;
  EXPECT_EQ(std::find(frozen.begin(), frozen.end(), "bqkv"), frozen.end()) << "the biases still train";
  // q's biases alone: the q rows of bqkv (L, QKV) in each layer, a part of the tensor.
  const io::FreezeSet q = io::resolve_freeze(c, {"model.layers.*.self_attn.q_proj.bias"});
  EXPECT_TRUE(q.tensors.empty());
  const int64_t QKV = c.qkv_dim(), HD = int64_t(c.n_heads) * c.head_dim();
  std::vector<model::FrozenPart> want;
  for (int l = 0; l < c.n_layers; l++) want.push_back({"bqkv", l * QKV, l * QKV + HD});
  EXPECT_EQ(q.parts, want);
}

// tiny_hf's tensors, less those whose name contains `drop`, plus `extra` (an F32 tensor of the given
// shape), as DIR/model.safetensors next to tiny_hf's config.json.
std::string with_extra_tensor(const TempDir& tmp, const std::string& extra, const std::vector<int64_t>& shape,
                              const std::string& drop = "") {
  const std::string dir = tmp / "m";
  fs::create_directories(dir);
  fs::copy_file(kTinyHf + "/config.json", dir + "/config.json");
  io::SafetensorsCheckpoint src(kTinyHf);
  std::vector<io::TensorToWrite> tensors;
  for (const auto& name : src.names()) {
    const io::TensorView& v = src.get(name);
    if (drop.empty() || name.find(drop) == std::string::npos) tensors.push_back({name, v.dtype, v.shape, v.data});
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  static std::vector<float> zeros;
  zeros.assign(size_t(n), 0.5f);
  tensors.push_back({extra, io::DType::F32, shape, zeros.data()});
  io::write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  return dir;
}

TEST(HfCheckpoint, TensorsTheArchitectureLacksAreRefusedByName) {
  struct Case {
    std::string tensor;
    std::vector<int64_t> shape;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"model.layers.0.self_attn.W_pack.weight", {192, 64}, {"W_pack", "Baichuan", "q_proj, k_proj and v_proj"}},
      {"model.layers.1.self_attn.o_proj.bias", {64}, {"attention output projection", "q/k/v only (Qwen2)"}},
      {"model.layers.0.self_attn.q_proj.bias", {64}, {"query/key/value bias", "model_type llama", "\"qwen2\""}},
      {"model.layers.0.mlp.down_proj.bias", {64}, {"MLP bias", "without biases"}},
      {"model.layers.0.self_attn.rotary_emb.inv_freq", {8}, {"(no error)"}},  // ignored, as transformers does
      {"model.vision_tower.weight", {4}, {"unexpected tensor", "Llama, Qwen2 or Mistral"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.tensor);
    TempDir tmp;
    const std::string dir = with_extra_tensor(tmp, c.tensor, c.shape);
    const std::string e = error_of([&] { io::load_hf_model(dir, model::Precision::fp32); });
    for (const auto& part : c.parts) EXPECT_CONTAINS(e, part);
    if (c.parts[0] != "(no error)") {
      EXPECT_CONTAINS(e, c.tensor);
      EXPECT_CONTAINS(e, dir + "/model.safetensors");
    }
  }
  // A Baichuan-style layer has W_pack instead of q/k/v_proj: refused as W_pack, not as a missing q_proj.
  TempDir tmp;
  const std::string dir =
      with_extra_tensor(tmp, "model.layers.0.self_attn.W_pack.weight", {192, 64}, "layers.0.self_attn.q_proj");
  const std::string e = error_of([&] { io::load_hf_model(dir, model::Precision::fp32); });
  EXPECT_CONTAINS(e, "W_pack");
  EXPECT_EQ(e.find("not found"), std::string::npos) << e;
}

TEST(HfCheckpoint, ATiedModelTakesAnLmHeadOnlyAsAnExactCopy) {
  model::LlamaConfig c = model::preset_config("tiny");
  c.tie_embeddings = true;
  model::LlamaModel m(c, model::Precision::fp32, 5);
  m.init_random(0.1f);
  TempDir tmp;
  io::save_hf_checkpoint(m, tmp / "tied", "float32");
  EXPECT_EQ(io::SafetensorsCheckpoint(tmp / "tied").find("lm_head.weight"), nullptr) << "tied: no lm_head.weight";
  io::SafetensorsCheckpoint src(tmp / "tied");
  const io::TensorView& emb = src.get("model.embed_tokens.weight");
  std::vector<float> head(size_t(emb.numel()));
  src.read_f32("model.embed_tokens.weight", emb.shape, head.data());
  for (const char* kind : {"copy", "different"}) {
    SCOPED_TRACE(kind);
    const std::string dir = tmp / kind;
    fs::create_directories(dir);
    fs::copy_file(tmp / "tied/config.json", dir + "/config.json");
    std::vector<io::TensorToWrite> tensors;
    for (const auto& name : src.names()) {
      const io::TensorView& v = src.get(name);
      tensors.push_back({name, v.dtype, v.shape, v.data});
    }
    std::vector<float> h = head;
    if (std::string(kind) == "different") h[1234] += 1.0f;
    tensors.push_back({"lm_head.weight", io::DType::F32, emb.shape, h.data()});
    io::write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
    const std::string e = error_of([&] { io::load_hf_model(dir, model::Precision::fp32); });
    if (std::string(kind) == "copy") {
      EXPECT_EQ(e, "(no error)");
    } else {
      EXPECT_CONTAINS(e, "lm_head.weight differs from model.embed_tokens.weight");
      EXPECT_CONTAINS(e, "tie_word_embeddings");
    }
  }
}

TEST(HfExport, TokenizerJsonVocabCountsModelAndAddedTokens) {
  const auto q = io::tokenizer_json_vocab(testing::read_file(kQwen2 + "/tokenizer.json"), "qwen2");
  EXPECT_EQ(q.size, 459);  // 256 bytes + 200 merges + 3 specials, below the config's 512 rows
  EXPECT_EQ(q.added.at(456), "<|endoftext|>");
  EXPECT_EQ(q.added.at(458), "<|im_end|>");
  const auto l = io::tokenizer_json_vocab(testing::read_file(kLlama3 + "/tokenizer.json"), "llama3");
  EXPECT_EQ(l.size, 512);
  EXPECT_EQ(l.added.at(502), "<|begin_of_text|>");
  EXPECT_EQ(l.added.at(511), "<|eot_id|>");
  EXPECT_CONTAINS(error_of([] { io::tokenizer_json_vocab("{\"model\": 3", "bad.json"); }), "bad.json");
  EXPECT_CONTAINS(error_of([] { io::tokenizer_json_vocab("{\"model\": {}}", "bad.json"); }), "model.vocab");
  EXPECT_CONTAINS(error_of([] { io::tokenizer_json_vocab(R"({"model": {"vocab": {"a": -1}}})", "bad.json"); }),
                  "token a has id -1");
}

TEST(HfExport, TokenizerSourcesGiveTheirFilesByteForByte) {
  auto names = [](const std::vector<io::HfExtraFile>& files) {
    std::vector<std::string> out;
    for (const auto& f : files) out.push_back(f.name);
    return out;
  };
  const auto q = io::tokenizer_source_files(kQwen2);
  EXPECT_EQ(names(q), (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  EXPECT_EQ(q[0].bytes, testing::read_file(kQwen2 + "/tokenizer.json"));
  EXPECT_EQ(q[1].bytes, testing::read_file(kQwen2 + "/tokenizer_config.json"));
  EXPECT_EQ(names(io::tokenizer_source_files(kLlama3 + "/tokenizer.json")), names(q))
      << "the file stands for its folder";
  EXPECT_EQ(names(io::tokenizer_source_files(kTinyHf)), std::vector<std::string>{"tokenizer.model"});
  const auto spm = io::tokenizer_source_files(kTinyHf + "/tokenizer.model");
  ASSERT_EQ(names(spm), std::vector<std::string>{"tokenizer.model"});
  EXPECT_EQ(spm[0].bytes, testing::read_file(kTinyHf + "/tokenizer.model"));
  TempDir tmp;
  EXPECT_CONTAINS(error_of([&] { io::tokenizer_source_files(tmp.path()); }),
                  "neither tokenizer.json nor tokenizer.model");
  EXPECT_CONTAINS(error_of([&] { io::tokenizer_source_files(tmp / "nope.model"); }), "does not exist");
}

TEST(HfExport, ATokenizerJsonIsCopiedAndEosListsReachGenerationConfig) {
  model::LlamaConfig c = model::preset_config("tiny");
  c.vocab_size = 512;
  c.bos_id = 502;
  c.eos_id = 503;
  c.extra_eos_ids = {510, 511};
  model::LlamaModel m(c, model::Precision::fp32, 7);
  m.init_random(0.1f);
  TempDir tmp;
  io::ExportOptions o;
  o.torch_dtype = "float32";
  o.tokenizer_model = kLlama3;
  io::export_hf(m, tmp / "out", o);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(testing::read_file(tmp / "out/" + std::string(f)), testing::read_file(kLlama3 + "/" + f)) << f;
  EXPECT_FALSE(fs::exists(tmp / "out/tokenizer.model"));
  EXPECT_FALSE(fs::exists(tmp / "out/special_tokens_map.json"));
  const json gen = json::parse(testing::read_file(tmp / "out/generation_config.json"));
  EXPECT_EQ(gen["bos_token_id"], 502);
  EXPECT_EQ(gen["eos_token_id"], json::array({503, 510, 511}));

  // No BOS (Qwen2): no bos_token_id; a tokenizer.json without tokenizer_config.json gets a plain one.
  c.bos_id = -1;
  c.eos_id = 456;
  c.extra_eos_ids = {};
  model::LlamaModel q(c, model::Precision::fp32, 8);
  q.init_random(0.1f);
  fs::create_directories(tmp / "tok");
  fs::copy_file(kQwen2 + "/tokenizer.json", tmp / "tok/tokenizer.json");
  o.tokenizer_model = tmp / "tok";
  io::export_hf(q, tmp / "out2", o);
  const json gen2 = json::parse(testing::read_file(tmp / "out2/generation_config.json"));
  EXPECT_FALSE(gen2.contains("bos_token_id")) << gen2.dump();
  EXPECT_EQ(gen2["eos_token_id"], 456);
  const json tc = json::parse(testing::read_file(tmp / "out2/tokenizer_config.json"));
  EXPECT_EQ(tc["eos_token"], "<|endoftext|>");
  EXPECT_FALSE(tc.contains("bos_token"));
  EXPECT_EQ(testing::read_file(tmp / "out2/tokenizer.json"), testing::read_file(kQwen2 + "/tokenizer.json"));

  // A tokenizer larger than the model's rows is refused before the folder appears.
  c.vocab_size = 400;
  c.eos_id = 2;
  model::LlamaModel small(c, model::Precision::fp32, 9);
  o.tokenizer_model = kLlama3;
  const std::string e = error_of([&] { io::export_hf(small, tmp / "out3", o); });
  EXPECT_CONTAINS(e, "512 tokens");
  EXPECT_CONTAINS(e, "vocab_size is 400");
  EXPECT_FALSE(fs::exists(tmp / "out3"));
}

// Every tensor of an HF folder as (dtype, shape, bytes), by name.
std::map<std::string, std::string> tensor_bytes(const std::string& dir) {
  io::SafetensorsCheckpoint ck(dir);
  std::map<std::string, std::string> out;
  for (const auto& name : ck.names()) {
    const io::TensorView& v = ck.get(name);
    std::string& s = out[name];
    s.append(io::dtype_name(v.dtype));
    for (int64_t d : v.shape) s.append(" ").append(std::to_string(d));
    s.append(":").append(reinterpret_cast<const char*>(v.data), v.nbytes);
  }
  return out;
}

// A tiny folder: load, export in the file's dtype, and get the same tensors byte for byte, the same
// tokenizer files, the same architecture, and the same values for config.json's `keys`.
void expect_round_trip(const std::string& dir, const std::string& dtype, const std::vector<std::string>& keys) {
  auto m = io::load_hf_model(dir, model::Precision::fp32);
  TempDir tmp;
  io::ExportOptions o;
  o.torch_dtype = dtype;
  o.tokenizer_model = dir;
  io::export_hf(*m, tmp / "out", o);
  EXPECT_EQ(tensor_bytes(tmp / "out"), tensor_bytes(dir));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(testing::read_file(tmp / "out/" + std::string(f)), testing::read_file(dir + "/" + f)) << f;
  const json src = json::parse(testing::read_file(dir + "/config.json"));
  const json out = json::parse(testing::read_file(tmp / "out/config.json"));
  for (const auto& key : keys) EXPECT_EQ(out.value(key, json()), src[key]) << key;
  const json gen_src = json::parse(testing::read_file(dir + "/generation_config.json"));
  const json gen_out = json::parse(testing::read_file(tmp / "out/generation_config.json"));
  EXPECT_EQ(gen_out["eos_token_id"], gen_src["eos_token_id"]);
  const model::LlamaConfig a = io::read_hf_config(dir), b = io::read_hf_config(tmp / "out");
  EXPECT_EQ(b.family, a.family);
  EXPECT_EQ(b.qkv_bias, a.qkv_bias);
  EXPECT_EQ(b.head_dim(), a.head_dim());
  EXPECT_EQ(b.rope_scaling.type, a.rope_scaling.type);
  EXPECT_EQ(b.rope_scaling.factor, a.rope_scaling.factor);
  EXPECT_EQ(b.rope_scaling.low_freq_factor, a.rope_scaling.low_freq_factor);
  EXPECT_EQ(b.rope_scaling.high_freq_factor, a.rope_scaling.high_freq_factor);
  EXPECT_EQ(b.rope_scaling.original_max_pos, a.rope_scaling.original_max_pos);
  EXPECT_EQ(b.sliding_window, a.sliding_window);
  EXPECT_EQ(b.bos_id, a.bos_id);
  EXPECT_EQ(b.eos_id, a.eos_id);
  EXPECT_EQ(b.extra_eos_ids, a.extra_eos_ids);
  EXPECT_EQ(b.tie_embeddings, a.tie_embeddings);
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.rope_theta, a.rope_theta);
  EXPECT_EQ(b.norm_eps, a.norm_eps);
}

const std::vector<std::string> kArchitectureKeys = {
    "architectures",       "model_type",          "hidden_size",
    "intermediate_size",   "num_attention_heads", "num_hidden_layers",
    "num_key_value_heads", "vocab_size",          "max_position_embeddings",
    "rms_norm_eps",        "rope_theta",          "tie_word_embeddings",
    "eos_token_id",        "hidden_act",          "torch_dtype"};

TEST(HfExport, TheReleasesGenerationConfigIsKeptWhenItsIdsFit) {
  // A release's generation_config.json (Qwen2.5-Instruct's: two end-of-turn ids, a pad id, sampling
  // defaults) is what the family ships, and more than config.json says: the export keeps it byte for
  // byte when its ids fit the model, and otherwise writes one from the config, saying why.
  auto m = io::load_hf_model(kQwen2, model::Precision::fp32);
  TempDir tmp;
  fs::create_directories(tmp / "src");
  const std::string release =
      "{\n  \"bos_token_id\": 456,\n  \"pad_token_id\": 456,\n  \"do_sample\": true,\n  \"eos_token_id\": [\n"
      "    457,\n    456\n  ],\n  \"repetition_penalty\": 1.05,\n  \"temperature\": 0.7,\n  \"top_p\": 0.8,\n"
      "  \"top_k\": 20\n}\n";
  testing::write_file(tmp / "src/generation_config.json", release);
  io::ExportOptions o;
  o.torch_dtype = "float32";
  o.source_dir = tmp / "src";
  const auto kept = io::export_hf(*m, tmp / "out", o);
  EXPECT_EQ(testing::read_file(tmp / "out/generation_config.json"), release);
  EXPECT_CONTAINS(kept.generation_config, "kept from");
  // An id beyond the vocabulary (another model's file): written from the config, and said.
  testing::write_file(tmp / "src/generation_config.json", "{\"eos_token_id\": [151645, 151643]}");
  const auto written = io::export_hf(*m, tmp / "out2", o);
  const json gen = json::parse(testing::read_file(tmp / "out2/generation_config.json"));
  EXPECT_EQ(gen["eos_token_id"], 456);
  EXPECT_CONTAINS(written.generation_config, "151645");
}

TEST(HfExport, TinyQwen2FolderRoundTrips) {
  const model::LlamaConfig q = io::read_hf_config(kQwen2);
  EXPECT_EQ(q.family, model::Family::qwen2);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_TRUE(q.tie_embeddings);
  EXPECT_EQ(q.bos_id, 456) << "bos_token_id as Qwen2.5 ships it (the eos id; its tokenizer adds none)";
  EXPECT_EQ(q.vocab_size, 512);
  expect_round_trip(kQwen2, "bfloat16", kArchitectureKeys);
}

TEST(HfExport, TinyLlama3FolderRoundTrips) {
  const model::LlamaConfig l = io::read_hf_config(kLlama3);
  EXPECT_EQ(l.head_dim(), 32);
  EXPECT_EQ(l.rope_scaling.type, model::RopeScaling::Type::llama3);
  EXPECT_EQ(l.rope_scaling.original_max_pos, 64);
  EXPECT_EQ(l.bos_id, 502);
  EXPECT_EQ(l.eos_id, 503);
  EXPECT_EQ(l.extra_eos_ids, (std::vector<int>{510, 511}));
  std::vector<std::string> keys = kArchitectureKeys;
  keys.insert(keys.end(), {"bos_token_id", "head_dim", "rope_scaling", "attention_bias"});
  expect_round_trip(kLlama3, "float32", keys);
}

}  // namespace
}  // namespace llamatrain
