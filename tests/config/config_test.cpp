// The YAML config: every file in configs/ loads, validates and round-trips through to_yaml; a
// NeMo-style Llama YAML and test_llama.sh's overrides load unchanged; the shapes in configs/ agree
// with Hugging Face config.json files built from the model presets; unknown keys, wrong types,
// out-of-range and unsupported NeMo values give errors that name the key, the value, what is allowed
// and the file:line; interpolations, overrides and derived checks behave as OmegaConf/NeMo do; the
// key reference in docs/configuration.md is the one generated from the schema.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "model/config.h"
#include "config/config.h"

using llamatrain::Error;
using llamatrain::testing::source_path;
using llamatrain::testing::TempDir;
using namespace llamatrain::train;
namespace fs = std::filesystem;

namespace {

// A minimal valid config (the required keys only) followed by `extra` YAML text.
const char* kBase = "model:\n"
                    "  tokenizer:\n"
                    "    model: /models/tokenizer.model\n"
                    "  data:\n"
                    "    data_prefix: [1.0, /data/corpus_text_document]\n";

LoadedConfig load(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return load_config_text(yaml, "test.yaml", overrides);
}

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load(yaml, overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_CONTAINS(haystack, needle)                                                                \
  do {                                                                                                   \
    const std::string h_ = (haystack);                                                                   \
    EXPECT_NE(h_.find(needle), std::string::npos) << "expected to find: " << (needle) << "\nin: " << h_; \
  } while (0)

// The configs whose shape comes from model.init_from, with the folder of configs/hf holding that
// model's real config.json (no weights: enough for loading the config and for `llamatrain plan`).
const std::map<std::string, std::string> kFamilyConfigs = {
    {"llama3.1_8b.yaml", "Llama-3.1-8B"}, {"qwen2.5_7b.yaml", "Qwen2.5-7B"}, {"mistral_7b.yaml", "Mistral-7B-v0.1"}};

// Overrides that fill the keys configs/ leave to the user (???); harmless where unused.
std::vector<std::string> user_overrides() {
  return {"model.data.data_prefix=[1.0,/data/corpus_text_document]", "model.tokenizer.model=/models/tokenizer.model",
          "model.data.train_ds.file_names=[/data/train.jsonl]"};
}

}  // namespace

TEST(Config, EveryFileInConfigsLoadsValidatesAndRoundTrips) {
  TempDir tmp;
  // The QNLI config starts from a Hugging Face folder: give it a Llama 2 7B config.json.
  fs::create_directories(tmp / "llama2-7b");
  llamatrain::io::write_hf_config(tmp / "llama2-7b", llamatrain::model::preset_config("llama2-7b"), "float16");
  int files = 0;
  for (const auto& f : fs::directory_iterator(source_path("configs"))) {
    if (f.path().extension() != ".yaml") continue;
    files++;
    SCOPED_TRACE(f.path().string());
    auto ov = user_overrides();
    if (f.path().filename() == "llama2_7b_qnli.yaml") ov.push_back("model.init_from=" + (tmp / "llama2-7b"));
    // The other families' configs start from their Hugging Face folder: the real config.json in configs/hf.
    if (auto it = kFamilyConfigs.find(f.path().filename().string()); it != kFamilyConfigs.end())
      ov.push_back("model.init_from=" + source_path("configs/hf/" + it->second));
    LoadedConfig c;
    ASSERT_NO_THROW(c = load_config(f.path().string(), ov));
    // The resolved config written out and read back is the same config.
    const std::string yaml = to_yaml(c.config);
    LoadedConfig back;
    ASSERT_NO_THROW(back = load_config_text(yaml, "resolved.yaml")) << yaml;
    EXPECT_TRUE(back.config == c.config) << yaml;
    EXPECT_EQ(to_yaml(back.config), yaml);
    EXPECT_NO_THROW(c.config.lr_schedule());
    EXPECT_EQ(c.config.model.global_batch_size % (c.config.model.micro_batch_size * c.config.data_parallel_size()), 0);
  }
  EXPECT_GE(files, 10);
}

TEST(Config, SeedsSevenBillionLayout) {
  const LoadedConfig c = load_config(source_path("configs/llama2_7b.yaml"), user_overrides());
  const TrainConfig& t = c.config;
  EXPECT_EQ(t.world_size(), 128);
  EXPECT_EQ(t.data_parallel_size(), 16);  // 128 / (TP 8 x PP 1)
  EXPECT_EQ(t.num_micro_batches(), 16);   // 256 / (1 x 16)
  EXPECT_EQ(t.trainer.precision, llamatrain::model::Precision::bf16_sr);
  EXPECT_EQ(t.model.max_position_embeddings, 4096);  // ${.encoder_seq_length}
  EXPECT_EQ(t.model.data.seq_length, 4096);          // ${model.encoder_seq_length}
  const LrSchedule s = t.lr_schedule();
  EXPECT_EQ(s.kind, ScheduleKind::cosine_annealing);
  EXPECT_EQ(s.warmup_steps, 2000);
  EXPECT_EQ(s.max_steps, 10000);
  EXPECT_DOUBLE_EQ(s.lr(0), 3e-4 / 2001);  // the first update: scheduler step 0
  EXPECT_DOUBLE_EQ(s.lr(2000), 3e-4);
  EXPECT_DOUBLE_EQ(s.lr(10000), 3e-5);
  const auto l = t.model.llama_config(32000);
  EXPECT_EQ(l.num_params(), 6738415616);               // docs/formats.md 4.2: Llama-2-7B has 6,738,415,616 parameters
  EXPECT_EQ(t.model.padded_vocab_size(32000), 32000);  // multiple of 8 x TP 8 = 64
  EXPECT_EQ(t.model.padded_vocab_size(32001), 32064);
  // The model keeps the real vocabulary; the padding is the layout's.
  const auto odd = t.model.llama_config(32001);
  EXPECT_EQ(odd.vocab_size, 32001);
  EXPECT_EQ(odd.num_params(), l.num_params() + 2 * 4096);
  EXPECT_EQ(odd.padded_vocab_size(8), 32064);
  EXPECT_EQ(odd.padded_vocab_size(1), 32008);
}

TEST(Config, SeventyBillionUsesNeMosGqaSpelling) {
  const LoadedConfig c = load_config(source_path("configs/llama2_70b.yaml"), user_overrides());
  EXPECT_EQ(c.config.model.kv_heads(), 8);  // num_kv_heads: 8
  EXPECT_EQ(c.config.model.kv_channels, 128);
  EXPECT_TRUE(c.config.model.distributed_optimizer);
  EXPECT_EQ(c.config.data_parallel_size(), 4);
}

// The shapes in configs/ are the real models': loading each with model.init_from pointing at the
// model's config.json (built from model::preset_config, or docs/formats.md 4.1 for 70B) must agree.
TEST(Config, ShapesAgreeWithHuggingFaceConfigs) {
  const llamatrain::model::LlamaConfig l70 = {.dim = 8192,
                                              .ffn_dim = 28672,
                                              .n_layers = 80,
                                              .n_heads = 64,
                                              .n_kv_heads = 8,
                                              .vocab_size = 32000,
                                              .max_seq_len = 4096,
                                              .norm_eps = 1e-5f};
  const std::vector<std::pair<std::string, llamatrain::model::LlamaConfig>> models = {
      {"llama2_7b.yaml", llamatrain::model::preset_config("llama2-7b")},
      {"llama2_13b.yaml", llamatrain::model::preset_config("llama2-13b")},
      {"llama2_70b.yaml", l70},
      {"tinyllama_1.1b.yaml", llamatrain::model::preset_config("tinyllama-1.1b")},
      {"stories15m.yaml", llamatrain::model::preset_config("stories15m")},
      {"tiny.yaml", llamatrain::model::preset_config("tiny")},
  };
  TempDir tmp;
  for (const auto& [file, hf] : models) {
    SCOPED_TRACE(file);
    const std::string dir = tmp / file;
    fs::create_directories(dir);
    llamatrain::io::write_hf_config(dir, hf, "bfloat16");
    auto ov = user_overrides();
    ov.push_back("model.init_from=" + dir);
    LoadedConfig c;
    ASSERT_NO_THROW(c = load_config(source_path("configs/" + file), ov));
    const auto l = c.config.model.llama_config(hf.vocab_size);
    EXPECT_EQ(l.dim, hf.dim);
    EXPECT_EQ(l.ffn_dim, hf.ffn_dim);
    EXPECT_EQ(l.n_layers, hf.n_layers);
    EXPECT_EQ(l.n_heads, hf.n_heads);
    EXPECT_EQ(l.n_kv_heads, hf.n_kv_heads);
    EXPECT_EQ(l.norm_eps, hf.norm_eps);
    EXPECT_EQ(l.tie_embeddings, hf.tie_embeddings);
    EXPECT_EQ(l.num_params(), hf.num_params());
  }
}

// The other families' configs take their architecture from configs/hf's config.json: the facts of
// each model card (Llama 3.1 8B: GQA 8, llama3 RoPE scaling; Qwen2.5 7B: q/k/v biases, no BOS, a padded
// vocabulary; Mistral 7B: sliding window 4096; TinyLlama 1.1B: Llama 2 with 4 kv heads).
TEST(Config, FamilyConfigsTakeTheirArchitectureFromTheHfFolders) {
  namespace m = llamatrain::model;
  struct Want {
    std::string file;
    m::Family family;
    int64_t params;  // without padding rows
    int tp;
  };
  const std::vector<Want> wants = {{"llama3.1_8b.yaml", m::Family::llama, 8030261248, 8},
                                   {"qwen2.5_7b.yaml", m::Family::qwen2, 7615616512, 4},
                                   {"mistral_7b.yaml", m::Family::mistral, 7241732096, 8}};
  for (const Want& w : wants) {
    SCOPED_TRACE(w.file);
    auto ov = user_overrides();
    ov.push_back("model.init_from=" + source_path("configs/hf/" + kFamilyConfigs.at(w.file)));
    LoadedConfig c;
    ASSERT_NO_THROW(c = load_config(source_path("configs/" + w.file), ov));
    EXPECT_EQ(c.config.model.tensor_model_parallel_size, w.tp);
    const m::LlamaConfig hf = llamatrain::io::read_hf_config(*c.config.model.init_from);
    EXPECT_EQ(hf.family, w.family);
    EXPECT_EQ(hf.num_params(), w.params);
    EXPECT_EQ(hf.n_kv_heads % w.tp, 0) << "TP must divide the kv heads";
    EXPECT_EQ(c.config.model.tokenizer.library, w.family == m::Family::mistral ? "sentencepiece" : "huggingface");
  }
  const m::LlamaConfig l3 = llamatrain::io::read_hf_config(source_path("configs/hf/Llama-3.1-8B"));
  EXPECT_EQ(l3.rope_scaling.type, m::RopeScaling::Type::llama3);
  EXPECT_EQ(l3.rope_scaling.original_max_pos, 8192);
  const m::LlamaConfig q = llamatrain::io::read_hf_config(source_path("configs/hf/Qwen2.5-7B"));
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(q.vocab_size, 152064);
  const m::LlamaConfig mi = llamatrain::io::read_hf_config(source_path("configs/hf/Mistral-7B-v0.1"));
  EXPECT_EQ(mi.sliding_window, 4096);
  const m::LlamaConfig tl = llamatrain::io::read_hf_config(source_path("configs/hf/TinyLlama-1.1B"));
  EXPECT_EQ(tl.num_params(), llamatrain::model::preset_config("tinyllama-1.1b").num_params());
}

TEST(Config, InitFromTakesTheShapeAndNamesADisagreeingKey) {
  TempDir tmp;
  llamatrain::model::LlamaConfig hf = llamatrain::model::preset_config("tinyllama-1.1b");
  llamatrain::io::write_hf_config(tmp / "config.json", hf, "bfloat16");
  const std::string init = "model.init_from=" + (tmp / "");
  // Shape keys absent: they come from config.json, max_position_embeddings too.
  LoadedConfig c = load(kBase, {init});
  EXPECT_EQ(c.config.model.hidden_size, 2048);
  EXPECT_EQ(c.config.model.num_layers, 22);
  EXPECT_EQ(c.config.model.kv_heads(), 4);
  EXPECT_EQ(c.config.model.max_position_embeddings, 2048);  // config.json's, as the key is not given
  EXPECT_DOUBLE_EQ(c.config.model.layernorm_epsilon, 1e-5);
  // A given key that disagrees is named, with both values.
  const std::string e = error_of(std::string(kBase) + "  hidden_size: 4096\n", {init});
  EXPECT_CONTAINS(e, "model.hidden_size (test.yaml:6:16): got 4096, but ");
  EXPECT_CONTAINS(e, "config.json has hidden_size 2048");
  EXPECT_CONTAINS(error_of(kBase, {init, "model.num_kv_heads=8"}),
                  "model.num_query_groups (override 'model.num_kv_heads=8'): got 8, but ");
  EXPECT_CONTAINS(error_of(kBase, {init, "model.layernorm_epsilon=1e-6"}), "rms_norm_eps 1e-05");
  // The tokenizer comes from the folder too.
  LoadedConfig noTok = load("model:\n  data:\n    data_prefix: [x]\n", {init});
  EXPECT_EQ(noTok.config.model.tokenizer_model_path(), (fs::path(tmp / "") / "tokenizer.model").string());
  EXPECT_CONTAINS(error_of(kBase, {"model.init_from=" + (tmp / "nope")}), "which is not a folder");
  fs::create_directories(tmp / "empty");
  EXPECT_CONTAINS(error_of(kBase, {"model.init_from=" + (tmp / "empty")}), "has no config.json");
}

TEST(Config, NeMoLlamaYamlLoadsAndListsIgnoredKeys) {
  const LoadedConfig c =
      load_config(source_path("tests/train/fixtures/nemo_llama.yaml"), {"model.data.data_prefix=[1.0,/data/x]"});
  const TrainConfig& t = c.config;
  EXPECT_EQ(t.trainer.precision, llamatrain::model::Precision::fp32);  // precision: 32
  EXPECT_FALSE(t.trainer.max_epochs.has_value());                      // -1
  EXPECT_EQ(t.model.max_position_embeddings, 512);
  EXPECT_EQ(t.model.tokenizer.library, "huggingface");
  EXPECT_EQ(t.model.tokenizer_model_path(), "/root/scripts/data/llama7b-hf/tokenizer.model");
  EXPECT_EQ(t.model.optim.betas, (std::vector<double>{0.9, 0.98}));
  EXPECT_EQ(t.model.data.validation_ds.prompt_template, "{input} {output}");  // ${model.data.train_ds...}
  EXPECT_EQ(t.model.data.train_ds.concat_sampling_probabilities, std::vector<double>{1.0});
  // NeMo's sched values (warmup 500 + constant 50000) fit its max_steps 100000.
  EXPECT_EQ(t.lr_schedule().decay_steps, 100000 - 50500);
  ASSERT_FALSE(c.notes.empty());
  const std::string& ignored = c.notes[0];
  EXPECT_EQ(ignored.rfind("ignored (no effect here): ", 0), 0u);
  // The fixture's accelerator: tpu (the Neuron configs' XLA device) trains on the CPU, and says so.
  EXPECT_EQ(t.trainer.accelerator, "tpu");
  EXPECT_TRUE(std::any_of(c.notes.begin(), c.notes.end(), [](const std::string& n) {
    return n == "trainer.accelerator tpu (an XLA device, as on Trainium) trains on the cpu here";
  }));
  for (const char* k : {"model.persist_layer_norm", "model.bias_activation_fusion", "model.nsys_profile",
                        "exp_manager.checkpoint_callback_params.model_parallel_size", "model.data.validation_ds.metric",
                        "enable_checkpoint_removal_protection"})
    EXPECT_CONTAINS(ignored, k);
  EXPECT_EQ(
      std::count_if(c.notes.begin(), c.notes.end(), [](const std::string& n) { return n.rfind("ignored", 0) == 0; }),
      1);
}

// The overrides the Neuron NeMo launch script test_llama.sh passes, applied to the NeMo YAML.
TEST(Config, TestLlamaShOverridesApply) {
  const std::vector<std::string> ov = {
      "trainer.devices=32",
      "trainer.num_nodes=4",
      "trainer.max_epochs=null",
      "trainer.max_steps=10000",
      "trainer.val_check_interval=10000",
      "trainer.log_every_n_steps=1",
      "trainer.limit_val_batches=1",
      "trainer.limit_test_batches=1",
      "trainer.accumulate_grad_batches=1",
      "trainer.precision=32",
      "model.megatron_amp_O2=false",
      "model.tokenizer.type=/home/u/llamav2_weights/7b-hf",
      "model.micro_batch_size=1",
      "model.global_batch_size=256",
      "model.tensor_model_parallel_size=8",
      "model.pipeline_model_parallel_size=1",
      "model.max_position_embeddings=4096",
      "model.encoder_seq_length=4096",
      "model.hidden_size=4096",
      "model.ffn_hidden_size=11008",
      "model.num_layers=32",
      "model.num_attention_heads=32",
      "model.init_method_std=0.021",
      "model.hidden_dropout=0",
      "model.layernorm_epsilon=1e-5",
      "model.data.data_prefix=[1.0,/home/u/examples_datasets/llama_7b/book.jsonl-processed_text_document]",
      "model.data.num_workers=1",
      "model.data.seq_length=4096",
      "model.optim.name=adamw",
      "model.optim.lr=3.0e-4",
      "model.optim.betas=[0.9,0.95]",
      "model.optim.weight_decay=0.1",
      "model.optim.sched.name=CosineAnnealing",
      "model.optim.sched.warmup_steps=2000",
      "model.optim.sched.constant_steps=0",
      "model.optim.sched.min_lr=3.0e-5",
      "model.optim.capturable=True",
      "model.sequence_parallel=True",
      "model.activations_checkpoint_granularity=full",
      "model.activations_checkpoint_method=uniform",
      "model.activations_checkpoint_num_layers=1",
      "+model.save_xser=True",
      "+model.load_xser=True",
      "+model.use_flash_attention=False",
      "model.wrap_with_zero=False",
      "model.zero_use_master_weight=False",
      "model.zero_use_fp32_grad_accum=",
      "model.use_cpu_initialization=True",
      "exp_manager.create_tensorboard_logger=True",
      "exp_manager.resume_if_exists=False",
      "exp_manager.resume_ignore_no_checkpoint=False",
      "exp_manager.create_checkpoint_callback=True",
      "exp_manager.explicit_log_dir=null",
      "+exp_manager.checkpoint_callback_params.train_time_interval=36000",
      "model.resume_from_checkpoint=/efs/checkpoint/megatron_gpt--step\\=1085-consumed_samples\\=69632.0-last.ckpt"};
  const LoadedConfig c = load_config(source_path("tests/train/fixtures/nemo_llama.yaml"), ov);
  const TrainConfig& t = c.config;
  EXPECT_EQ(t.data_parallel_size(), 16);
  EXPECT_EQ(t.num_micro_batches(), 16);
  EXPECT_EQ(t.model.max_position_embeddings, 4096);
  EXPECT_EQ(t.model.data.seq_length, 4096);
  EXPECT_EQ(t.model.data.train_ds.max_seq_length, 4096);  // ${model.encoder_seq_length} after the override
  EXPECT_EQ(t.model.optim.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(t.model.activations_checkpoint_granularity, "full");
  EXPECT_FALSE(t.model.distributed_optimizer);
  EXPECT_FALSE(t.exp_manager.resume_if_exists);
  EXPECT_EQ(t.exp_manager.checkpoint_callback_params.train_time_interval, 36000.0);
  EXPECT_EQ(t.model.resume_from_checkpoint,
            "/efs/checkpoint/megatron_gpt--step=1085-consumed_samples=69632.0-last.ckpt");
  EXPECT_EQ(t.model.data.data_prefix.train,
            (std::vector<std::string>{"1.0", "/home/u/examples_datasets/llama_7b/book.jsonl-processed_text_document"}));
  EXPECT_EQ(t.lr_schedule().warmup_steps, 2000);
  EXPECT_CONTAINS(c.notes[0], "model.save_xser");
  EXPECT_CONTAINS(c.notes[0], "model.zero_use_fp32_grad_accum");
}

TEST(Config, UnknownKeysNameTheClosestValidKey) {
  EXPECT_CONTAINS(error_of(std::string(kBase) + "trainer:\n  max_step: 10\n"),
                  "unknown key 'trainer.max_step' (test.yaml:7:3): did you mean trainer.max_steps?");
  // A known name in the wrong section.
  EXPECT_CONTAINS(error_of(std::string(kBase) + "  seq_length: 10\n"),
                  "unknown key 'model.seq_length' (test.yaml:6:3): did you mean model.data.seq_length?");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.sched.warmup_step=3"}),
                  "unknown key 'model.optim.sched.warmup_step' (override 'model.optim.sched.warmup_step=3'): did you "
                  "mean model.optim.sched.warmup_steps?");
  EXPECT_CONTAINS(error_of(kBase, {"trainr.max_steps=3"}),
                  "unknown key 'trainr.max_steps' (override 'trainr.max_steps=3'): did you mean trainer.max_steps?");
  // Nothing close: the section's keys are listed.
  const std::string far = error_of(std::string(kBase) + "trainer:\n  zzzzzzzz: 1\n");
  EXPECT_CONTAINS(far, "unknown key 'trainer.zzzzzzzz' (test.yaml:7:3): keys under trainer are ");
  EXPECT_CONTAINS(far, "max_steps");
  EXPECT_CONTAINS(far, "hint: `llamatrain train --help-config`");
  // Several unknown keys are reported together.
  EXPECT_CONTAINS(error_of(std::string(kBase) + "trainer:\n  max_step: 1\n  devicez: 2\n"), "2 unknown keys");
}

TEST(Config, WrongTypesAndRangesNameKeyValueAndPlace) {
  EXPECT_CONTAINS(error_of(std::string(kBase) + "trainer:\n  max_steps: ten\n"),
                  "trainer.max_steps (test.yaml:7:14): got 'ten', expected an integer");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.max_steps=0"}),
                  "trainer.max_steps (override 'trainer.max_steps=0'): got '0', expected >= 1");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.max_steps=1.5"}), "got '1.5', expected an integer");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.lr=fast"}), "model.optim.lr (override 'model.optim.lr=fast'): got "
                                                            "'fast', expected a finite number");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.lr=-1"}), "got '-1', expected > 0");
  EXPECT_CONTAINS(error_of(kBase, {"model.sequence_parallel=maybe"}), "got 'maybe', expected true or false");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.sched.name=Cosine"}),
                  "got 'Cosine', expected one of CosineAnnealing, WarmupAnnealing, WarmupPolicy");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.betas=0.9"}), "model.optim.betas (override 'model.optim.betas=0.9'): "
                                                              "got '0.9', expected a list of numbers");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.betas=[0.9,1.5]"}), "expected [beta1, beta2] with each in [0, 1)");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.devices=4000000000"}), "expected an integer that fits in 32 bits");
  EXPECT_CONTAINS(error_of(kBase, {"model.activations_checkpoint_granularity=most"}),
                  "got 'most', expected one of selective, full");
  EXPECT_CONTAINS(error_of(std::string(kBase) + "trainer:\n  max_steps: [1, 2]\n"), "got a list, expected an integer");
  // A value that came through an interpolation says so.
  EXPECT_CONTAINS(error_of(kBase, {"model.encoder_seq_length=x1"}), "model.encoder_seq_length");
  EXPECT_CONTAINS(error_of(std::string(kBase) + "trainer:\n  max_steps: ${model.seed}x\n"),
                  "(resolved from '${model.seed}x')");
}

TEST(Config, NeMoValuesThatCannotBeHonouredAreRefused) {
  EXPECT_CONTAINS(error_of(std::string(kBase) + "  hidden_dropout: 0.1\n"),
                  "model.hidden_dropout (test.yaml:6:19): got '0.1', expected 0: dropout is not implemented");
  EXPECT_CONTAINS(error_of(kBase, {"model.normalization=layernorm"}), "expected rmsnorm: Llama uses RMSNorm");
  EXPECT_CONTAINS(error_of(kBase, {"model.position_embedding_type=learned_absolute"}), "expected rope");
  EXPECT_CONTAINS(error_of(kBase, {"model.activation=gelu"}), "expected swiglu");
  EXPECT_CONTAINS(error_of(kBase, {"model.has_bias=true"}), "expected false: Llama has no biases");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.accumulate_grad_batches=4"}),
                  "expected 1: gradient accumulation follows from global_batch_size");
  EXPECT_CONTAINS(error_of(kBase, {"exp_manager.checkpoint_callback_params.monitor=val_loss"}),
                  "save_top_k keeps the newest K");
  EXPECT_CONTAINS(error_of(kBase, {"restore_from_path=/x.nemo"}), ".nemo archives are not read");
  EXPECT_CONTAINS(error_of(kBase, {"model.data.dataloader_type=cyclic"}), "cyclic is not implemented");
  // The accepted values pass, in NeMo's spellings.
  EXPECT_NO_THROW(load(kBase, {"model.hidden_dropout=0.0", "model.rotary_percentage=1.0", "model.has_bias=False",
                               "model.normalization='rmsnorm'", "model.virtual_pipeline_model_parallel_size=null"}));
}

TEST(Config, PrecisionMapping) {
  using llamatrain::model::Precision;
  const std::vector<std::pair<std::string, Precision>> ok = {{"32", Precision::fp32},
                                                             {"fp32", Precision::fp32},
                                                             {"'32'", Precision::fp32},
                                                             {"32-true", Precision::fp32},
                                                             {"bf16-mixed", Precision::bf16_mixed},
                                                             {"bf16", Precision::bf16_sr},
                                                             {"bf16-sr", Precision::bf16_sr}};
  for (const auto& [text, p] : ok) {
    SCOPED_TRACE(text);
    EXPECT_EQ(load(kBase, {"trainer.precision=" + text}).config.trainer.precision, p);
  }
  EXPECT_CONTAINS(error_of(kBase, {"trainer.precision=16"}), "fp16 is not supported");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.precision=16-mixed"}), "fp16 is not supported");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.precision=bf16-true"}), "stochastic rounding");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.precision=64"}), "expected 32 (fp32), bf16-mixed or bf16");
}

TEST(Config, InterpolationsResolveAfterOverrides) {
  // ${.encoder_seq_length} and ${model.encoder_seq_length} follow an override of their target.
  LoadedConfig c = load(kBase, {"model.encoder_seq_length=1024"});
  EXPECT_EQ(c.config.model.max_position_embeddings, 1024);
  EXPECT_EQ(c.config.model.data.seq_length, 1024);
  // multiply, nested interpolations, text around an interpolation, and a parent-relative one.
  c = load(std::string(kBase) + "  micro_batch_size: 2\n  global_batch_size: ${multiply:${.micro_batch_size}, 8}\n"
                                "exp_manager:\n  name: run_${model.seed}_${..name}\n");
  EXPECT_EQ(c.config.model.global_batch_size, 16);
  EXPECT_EQ(c.config.exp_manager.name, "run_1234_megatron_llama");
  EXPECT_EQ(load(kBase, {"model.optim.lr=${multiply:2e-4,0.5}"}).config.model.optim.lr, 1e-4);
  EXPECT_CONTAINS(error_of(kBase, {"model.global_batch_size=${multiply:9223372036854775807,2}"}),
                  "multiply overflows a 64-bit integer at the factor '2'");
  // A literal "${" is written as "\${".
  EXPECT_EQ(load(kBase, {"exp_manager.name=a\\${b}"}).config.exp_manager.name, "a${b}");
  EXPECT_CONTAINS(error_of(kBase, {"model.encoder_seq_length=${model.data.seq_length}"}), "interpolation cycle");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.max_steps=${model.nothing}"}),
                  "interpolation '${model.nothing}' refers to model.nothing, which is not set");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.max_steps=${oc.env:HOME}"}), "unknown resolver 'oc.env'");
  // A reference into a mapping leaves the mapping whole.
  c = load(kBase, {"model.data.train_ds.completion_map={a: x, b: y}",
                   "exp_manager.name=${model.data.train_ds.completion_map.a}"});
  EXPECT_EQ(c.config.exp_manager.name, "x");
  EXPECT_EQ(c.config.model.data.train_ds.completion_map, (std::map<std::string, std::string>{{"a", "x"}, {"b", "y"}}));
  // Ignored keys resolve only when something refers to them (OmegaConf resolves on access).
  EXPECT_NO_THROW(load(kBase, {"model.persist_layer_norm=${model.nothing}"}));
  EXPECT_EQ(load(kBase, {"+model.use_flash_attention=7", "trainer.max_steps=${model.use_flash_attention}"})
                .config.trainer.max_steps,
            7);
}

TEST(Config, OverrideForms) {
  LoadedConfig c = load(kBase, {"model.data.data_prefix=[0.7,/a,0.3,/b]", "+trainer.max_steps=7"});
  EXPECT_EQ(c.config.model.data.data_prefix.train, (std::vector<std::string>{"0.7", "/a", "0.3", "/b"}));
  EXPECT_EQ(c.config.trainer.max_steps, 7);
  // Hydra's dictionary form, written without spaces.
  c = load(kBase, {"model.data.data_prefix={train:[1.0,/a],validation:[/b],test:[/c]}"});
  EXPECT_TRUE(c.config.model.data.data_prefix.per_split);
  EXPECT_EQ(c.config.model.data.data_prefix.validation, std::vector<std::string>{"/b"});
  EXPECT_EQ(c.config.model.data.data_prefix.test, std::vector<std::string>{"/c"});
  // A later override wins; an override replaces a whole section's value.
  EXPECT_EQ(load(kBase, {"trainer.max_steps=5", "trainer.max_steps=6"}).config.trainer.max_steps, 6);
  EXPECT_EQ(load(kBase, {"model.optim={lr: 0.5}"}).config.model.optim.lr, 0.5);
  // NeMo's `sched: null` is no scheduler: a constant lr.
  EXPECT_EQ(load(kBase, {"model.optim.sched=null"}).config.lr_schedule().kind, ScheduleKind::none);
  EXPECT_EQ(load(std::string(kBase) + "  optim:\n    sched:\n").config.lr_schedule().kind, ScheduleKind::none);
  // Below an ignored key: accepted and listed.
  EXPECT_CONTAINS(load(kBase, {"model.nsys_profile.enabled=true"}).notes[0], "model.nsys_profile");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.max_steps"}), "override 'trainer.max_steps': expected key=value");
  EXPECT_CONTAINS(error_of(kBase, {"=3"}), "expected key=value with a dotted key");
  EXPECT_CONTAINS(error_of(kBase, {"~model.seed"}), "deleting keys is not supported");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.betas=[0.9,"}), "the value is not valid YAML");
  EXPECT_CONTAINS(error_of(kBase, {"model.data.train_ds.completion_map.yes=no"}), "expected the whole value");
}

TEST(Config, FreezeIsAListOfHuggingFacePatternsCheckedAgainstTheShape) {
  EXPECT_TRUE(load(kBase).config.model.freeze.empty());
  const LoadedConfig c = load(kBase, {"model.freeze=[model.layers.*,model.norm.weight]"});
  EXPECT_EQ(c.config.model.freeze, (std::vector<std::string>{"model.layers.*", "model.norm.weight"}));
  EXPECT_EQ(load(std::string(kBase) + "  freeze: [model.embed_tokens.weight]\n").config.model.freeze,
            std::vector<std::string>{"model.embed_tokens.weight"});
  const std::string none = error_of(kBase, {"model.freeze=[model.layer.*]"});
  EXPECT_CONTAINS(none, "model.freeze (override 'model.freeze=[model.layer.*]'): 'model.layer.*' matches no parameter");
  EXPECT_CONTAINS(none, "model.embed_tokens.weight (vocab_size, 768)");
  // One layer, and rows of the embedding (whose size is not known before the tokenizer is read), are
  // parts; a row range past a layer tensor's rows is not.
  EXPECT_EQ(load(kBase, {"model.freeze=[model.layers.0.*,\"model.embed_tokens.weight[:32000]\"]"}).config.model.freeze,
            (std::vector<std::string>{"model.layers.0.*", "model.embed_tokens.weight[:32000]"}));
  EXPECT_CONTAINS(error_of(kBase, {"model.freeze=[\"model.norm.weight[768:]\"]"}),
                  "'model.norm.weight[768:]' starts at row 768 of model.norm.weight, which has 768 rows");
}

TEST(Config, FileProblems) {
  EXPECT_CONTAINS(error_of(std::string(kBase) + "trainer:\n  max_steps: 1\n  max_steps: 2\n"),
                  "test.yaml:8:3: key 'trainer.max_steps' appears twice");
  EXPECT_CONTAINS(error_of("trainer: [1, 2\n"), "config test.yaml:2:1: invalid YAML");
  EXPECT_CONTAINS(error_of("- a\n- b\n"), "the document is a list, expected a mapping of keys");
  EXPECT_CONTAINS(error_of(std::string(kBase) + "trainer: 5\n"), "'trainer' is '5', expected a mapping of its keys");
  try {
    load_config("/nonexistent/x.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "config /nonexistent/x.yaml: cannot open it");
  }
  // An empty file is all defaults; data_prefix and a tokenizer are then missing.
  EXPECT_CONTAINS(error_of("", {"model.tokenizer.model=/t"}), "model.data.data_prefix (default): is not set");
  EXPECT_CONTAINS(error_of("", {"model.data.data_prefix=[x]"}), "model.tokenizer.model (default): is not set");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.lr=???"}), "is '?\?\?' (a value you must give)");
}

TEST(Config, DerivedChecks) {
  EXPECT_CONTAINS(error_of(kBase, {"trainer.devices=8", "model.global_batch_size=12", "model.micro_batch_size=1"}),
                  "model.global_batch_size (override 'model.global_batch_size=12'): got 12, expected a multiple of "
                  "micro_batch_size 1 x data-parallel size 8 = 8");
  EXPECT_CONTAINS(error_of(kBase, {"trainer.devices=6", "model.tensor_model_parallel_size=4",
                                   "model.num_attention_heads=4", "model.hidden_size=64", "model.ffn_hidden_size=128"}),
                  "TP 4 x PP 1 = 4 does not divide the 6 ranks");
  EXPECT_CONTAINS(error_of(kBase, {"model.num_attention_heads=7"}), "got 7, expected a divisor of hidden_size 768");
  EXPECT_CONTAINS(error_of(kBase, {"model.num_query_groups=5"}), "got 5, expected a divisor of num_attention_heads 12");
  EXPECT_CONTAINS(error_of(kBase, {"model.kv_channels=128"}),
                  "expected null or hidden_size / num_attention_heads = 64");
  EXPECT_CONTAINS(error_of(kBase, {"model.num_query_groups=4", "trainer.devices=3",
                                   "model.tensor_model_parallel_size=3", "model.global_batch_size=4"}),
                  "expected a divisor of num_attention_heads 12, and a divisor or a multiple of the key/value heads 4");
  // fewer kv heads than TP ranks: each is replicated
  EXPECT_NO_THROW(load(kBase, {"model.num_query_groups=2", "trainer.devices=4", "model.tensor_model_parallel_size=4"}));
  EXPECT_CONTAINS(
      error_of(kBase, {"model.pipeline_model_parallel_size=5", "trainer.devices=5", "model.global_batch_size=4"}),
      "got 5 stages for num_layers 12 (first stage even, last stage even), expected the other stages to "
      "split the remaining 12 layers evenly");
  // Megatron-core's uneven split: 1 + 5 + 5 + 1 layers; the first and last given, the middle even.
  EXPECT_EQ(load(kBase, {"model.pipeline_model_parallel_size=4", "trainer.devices=4", "model.global_batch_size=4",
                         "model.num_layers_in_first_pipeline_stage=1", "model.num_layers_in_last_pipeline_stage=1"})
                .config.model.pipeline_layers(),
            (std::vector<int>{1, 5, 5, 1}));
  EXPECT_CONTAINS(error_of(kBase, {"model.pipeline_model_parallel_size=4", "trainer.devices=4",
                                   "model.global_batch_size=4", "model.num_layers_in_first_pipeline_stage=2"}),
                  "expected the other stages to split the remaining 10 layers evenly");
  EXPECT_CONTAINS(error_of(kBase, {"model.data.seq_length=1024"}),
                  "model.data.seq_length (override 'model.data.seq_length=1024'): got 1024, expected at most "
                  "model.max_position_embeddings (512)");
  EXPECT_CONTAINS(error_of(kBase, {"exp_manager.checkpoint_callback_params.save_top_k=0"}),
                  "expected -1 (keep all) or K >= 1");
  EXPECT_CONTAINS(
      error_of(kBase, {"model.activations_checkpoint_granularity=full", "model.activations_checkpoint_method=null"}),
      "is null with granularity full");
  EXPECT_CONTAINS(error_of(kBase, {"model.data.data_prefix=[0.5,/a,/b]"}), "model.data.data_prefix (override");
  EXPECT_CONTAINS(error_of(kBase, {"model.data.splits_string=1,2,3,4"}), "got 4 numbers, expected 1 to 3");
  // Schedule errors carry the key's place.
  EXPECT_CONTAINS(error_of(std::string(kBase) + "  optim:\n    sched:\n      warmup_steps: 500\n      "
                                                "constant_steps: 50000\n",
                           {"trainer.max_steps=1000"}),
                  "model.optim.sched.warmup_steps (test.yaml:8:21): 500 + constant_steps 50000 leave -49500 decay "
                  "steps of max_steps 1000");
  EXPECT_CONTAINS(error_of(kBase, {"model.optim.sched.min_lr=1"}), "model.optim.sched.min_lr (override "
                                                                   "'model.optim.sched.min_lr=1'): got 1");
  // Notes for values that are legal but worth a word.
  const LoadedConfig c = load(kBase, {"model.optim.sched.max_steps=50", "model.sequence_parallel=true"});
  EXPECT_EQ(c.notes.size(), 2u);
  EXPECT_CONTAINS(c.notes[0] + c.notes[1], "the schedule runs over 50 steps");
  EXPECT_CONTAINS(c.notes[0] + c.notes[1], "no effect with tensor_model_parallel_size 1");
}

TEST(Config, AliasesFoldIntoNeMoKeys) {
  EXPECT_EQ(load(kBase, {"model.num_kv_heads=4"}).config.model.kv_heads(), 4);
  EXPECT_TRUE(load(kBase, {"model.wrap_with_zero=true"}).config.model.distributed_optimizer);
  EXPECT_TRUE(load(kBase, {"model.convert_to_hf=true"}).config.convert_to_hf);
  EXPECT_EQ(load(kBase, {"model.position_freq_base=500000"}).config.model.rotary_base, 500000.0);
  EXPECT_CONTAINS(error_of(std::string(kBase) + "  num_query_groups: 4\n  num_kv_heads: 6\n"),
                  "model.num_kv_heads (test.yaml:7:17) and model.num_query_groups (test.yaml:6:21) disagree");
  EXPECT_NO_THROW(load(std::string(kBase) + "  num_query_groups: 4\n  num_kv_heads: 4\n"));
}

TEST(Config, ChatRowsTakeATemplateByNameAndNeedFineTuning) {
  const std::string sft =
      "model:\n  tokenizer:\n    model: /t\n  data:\n    fine_tuning: true\n    chat: true\n    train_ds:\n"
      "      file_names: [/d/train.jsonl]\n";
  const LoadedConfig c = load(sft);
  EXPECT_TRUE(c.config.model.data.chat);
  EXPECT_EQ(c.config.model.data.chat_template, "auto");
  EXPECT_EQ(load(sft, {"model.data.chat_template=chatml"}).config.model.data.chat_template, "chatml");
  EXPECT_CONTAINS(error_of(sft, {"model.data.chat_template=vicuna"}), "model.data.chat_template");
  EXPECT_FALSE(load(kBase).config.model.data.chat);
  EXPECT_CONTAINS(error_of(kBase, {"model.data.chat=true"}), "model.data.fine_tuning=true");
}

TEST(Config, FineTuningMapsNeMoSftKeysOntoSftConfig) {
  const std::string sft =
      "model:\n  tokenizer:\n    model: /t\n  data:\n    fine_tuning: true\n    train_ds:\n"
      "      file_names: [/d/train.jsonl]\n      label_key: label\n"
      "      prompt_template: \"Question: {question}\\nAnswer: {label}\"\n"
      "      completion_map: {entailment: \"yes\", not_entailment: \"no\"}\n      truncation_method: left\n"
      "      add_bos: true\n";
  const LoadedConfig c = load(sft);
  const SftDatasetConfig& ds = c.config.model.data.train_ds;
  const auto s = ds.sft_config(0);
  EXPECT_EQ(s.prompt_template, "Question: {question}\nAnswer: ");
  EXPECT_EQ(s.completion_key, "label");
  EXPECT_EQ(s.completion_map.at("not_entailment"), "no");
  EXPECT_TRUE(s.truncate_prompt_left);
  EXPECT_TRUE(s.add_bos);
  EXPECT_TRUE(s.add_eos);
  EXPECT_EQ(s.seq_length, 512);
  // validation_ds takes train_ds's template, label and map.
  EXPECT_EQ(c.config.model.data.validation_ds.sft_config(0).prompt_template, s.prompt_template);
  EXPECT_EQ(c.config.model.data.validation_ds.completion_map, ds.completion_map);
  // NeMo's default template "{input} {output}".
  const auto def = load(kBase).config.model.data.train_ds.sft_config(0);
  EXPECT_EQ(def.prompt_template, "{input} ");
  EXPECT_EQ(def.completion_key, "output");
  EXPECT_FALSE(def.add_bos);
  EXPECT_CONTAINS(error_of(sft, {"model.data.train_ds.prompt_template='{label}: {question}'"}),
                  "expected a prompt followed by {label} at the end");
  EXPECT_CONTAINS(error_of(sft, {"model.data.train_ds.concat_sampling_probabilities=[0.5,0.5]"}),
                  "has 2 weights for 1 files");
  EXPECT_CONTAINS(error_of(sft, {"model.data.train_ds.file_names=null"}), "is not set, expected JSONL files");
  EXPECT_CONTAINS(error_of(sft, {"model.data.train_ds.add_sep=true"}), "no separator token");
}

TEST(Config, ToYamlQuotesWhatWouldReadBackDifferently) {
  const LoadedConfig c = load(kBase, {"exp_manager.version='null'", "exp_manager.name='true'",
                                      "model.data.data_prefix={train:[1.0,/a],validation:[/b],test:[/c]}",
                                      "model.data.train_ds.completion_map={a: 'x: y'}"});
  EXPECT_EQ(c.config.exp_manager.version, "null");
  const std::string yaml = to_yaml(c.config);
  const LoadedConfig back = load_config_text(yaml, "resolved.yaml");
  EXPECT_TRUE(back.config == c.config) << yaml;
  EXPECT_CONTAINS(yaml, "version: \"null\"");
}

TEST(Config, HelpAndDocsListEveryKey) {
  const std::string help = config_help();
  std::set<std::string> paths;
  for (const auto& k : config_keys()) {
    EXPECT_TRUE(paths.insert(k.path).second) << "twice: " << k.path;
    EXPECT_NE(help.find(k.path), std::string::npos) << k.path;
    EXPECT_FALSE(k.doc.empty()) << k.path;
  }
  // The reference section of docs/configuration.md is generated from the schema. To refresh it:
  // LLAMATRAIN_UPDATE_DOCS=1 build/release/config_test --gtest_filter=Config.HelpAndDocsListEveryKey
  const std::string doc_path = source_path("docs/configuration.md");
  std::string doc = llamatrain::testing::read_file(doc_path);
  const std::string begin = "<!-- keys:begin (generated from src/config/config.cpp) -->\n";
  const std::string end = "<!-- keys:end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos && b < e) << "markers missing in " << doc_path;
  const std::string generated = config_reference_markdown();
  if (std::getenv("LLAMATRAIN_UPDATE_DOCS")) {
    doc = doc.substr(0, b + begin.size()) + generated + doc.substr(e);
    llamatrain::testing::write_file(doc_path, doc);
  } else {
    EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), generated)
        << "docs/configuration.md is out of date; regenerate it with LLAMATRAIN_UPDATE_DOCS=1";
  }
  for (const auto& k : config_keys()) {
    const std::string name = k.path.substr(k.path.rfind('.') == std::string::npos ? 0 : k.path.rfind('.') + 1);
    EXPECT_NE(generated.find("| `" + name + "` |"), std::string::npos) << k.path;
  }
}
