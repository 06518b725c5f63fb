// The checks no single key can make, run on the converted TrainConfig (validate): layout (TP x PP
// divides the ranks, batch sizes), architecture (heads, head dim, pipeline split, sequence lengths),
// optimizer and schedule, data and tokenizer; with model.init_from the shape keys come from the
// Hugging Face config.json and given ones must agree. Also whether a restricted key holds its allowed
// value (same_value, for load()). Each Error names the key and where it was set; a key's own type,
// limits and choices are checked by its converter, before this runs.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/names.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "model/shard.h"
#include "parallel/layout.h"
#include "config/config_convert.h"
#include "config/config_schema.h"

namespace llamatrain::train::config_detail {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Restricted keys and cross-key checks.

bool same_value(const YAML::Node& n, const std::string& allowed) {
  if (allowed == "null") return n.IsNull();
  if (!n.IsScalar()) return false;
  const std::string& t = n.Scalar();
  double a, b;
  if (parse_double(t, &a) && parse_double(allowed, &b)) return a == b;
  bool x, y;
  if (parse_bool(t, &x) && parse_bool(allowed, &y)) return x == y;
  return t == allowed;
}

namespace {

template <class... Args>
[[noreturn]] void fail_key(const Context& ctx, const std::string& key, fmt::format_string<Args...> f, Args&&... args) {
  fail("{} ({}): {}", key, ctx.where(key), fmt::format(f, std::forward<Args>(args)...));
}

// With model.init_from: shape keys come from config.json; given ones must agree.
void apply_init_from(TrainConfig& cfg, const Context& ctx) {
  ModelConfig& m = cfg.model;
  const std::string dir = *m.init_from;
  if (!fs::is_directory(dir))
    fail_key(ctx, "model.init_from",
             "got '{}', which is not a folder, expected a Hugging Face model folder\n"
             "hint: the folder holds config.json, *.safetensors (or pytorch_model*.bin) and tokenizer.model",
             dir);
  const std::string json = (fs::path(dir) / "config.json").string();
  if (!fs::exists(json))
    fail_key(ctx, "model.init_from",
             "'{}' has no config.json, expected a Hugging Face model folder\n"
             "hint: point model.init_from at the folder that holds config.json",
             dir);
  const model::LlamaConfig hf = io::read_hf_config(json);
  // The shortest decimal of a float config value, so 1e-05f reads back as 1e-05.
  auto decimal = [](float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); };
  auto agree_int = [&](const std::string& key, auto* field, int64_t hf_value, const char* hf_key, bool given) {
    if (given && int64_t(*field) != hf_value)
      fail_key(ctx, key,
               "got {}, but {} has {} {}, expected them to agree\nhint: remove {} (with model.init_from the "
               "architecture comes from config.json) or fix it",
               int64_t(*field), json, hf_key, hf_value, key);
    *field = static_cast<std::remove_reference_t<decltype(*field)>>(hf_value);
  };
  auto agree_real = [&](const std::string& key, double* field, float hf_value, const char* hf_key) {
    if (ctx.given(key) && float(*field) != hf_value)
      fail_key(ctx, key,
               "got {}, but {} has {} {}, expected them to agree\nhint: remove {} (with model.init_from the "
               "architecture comes from config.json) or fix it",
               *field, json, hf_key, hf_value, key);
    *field = decimal(hf_value);
  };
  agree_int("model.num_layers", &m.num_layers, hf.n_layers, "num_hidden_layers", ctx.given("model.num_layers"));
  agree_int("model.hidden_size", &m.hidden_size, hf.dim, "hidden_size", ctx.given("model.hidden_size"));
  agree_int("model.ffn_hidden_size", &m.ffn_hidden_size, hf.ffn_dim, "intermediate_size",
            ctx.given("model.ffn_hidden_size"));
  agree_int("model.num_attention_heads", &m.num_attention_heads, hf.n_heads, "num_attention_heads",
            ctx.given("model.num_attention_heads"));
  if (ctx.given("model.num_query_groups") && m.num_query_groups && *m.num_query_groups != hf.n_kv_heads)
    fail_key(ctx, "model.num_query_groups",
             "got {}, but {} has num_key_value_heads {}, expected them to agree\n"
             "hint: remove model.num_query_groups / num_kv_heads or fix it",
             *m.num_query_groups, json, hf.n_kv_heads);
  m.num_query_groups = hf.n_kv_heads;
  if (m.kv_channels && *m.kv_channels != hf.head_dim())
    fail_key(ctx, "model.kv_channels",
             "got {}, but {} has head dim {}, expected them to agree\nhint: remove "
             "model.kv_channels",
             *m.kv_channels, json, hf.head_dim());
  agree_real("model.layernorm_epsilon", &m.layernorm_epsilon, hf.norm_eps, "rms_norm_eps");
  agree_real("model.rotary_base", &m.rotary_base, hf.rope_theta, "rope_theta");
  if (ctx.given("model.share_embeddings_and_output_weights") &&
      m.share_embeddings_and_output_weights != hf.tie_embeddings)
    fail_key(ctx, "model.share_embeddings_and_output_weights",
             "got {}, but {} has tie_word_embeddings {}, expected "
             "them to agree\nhint: remove the key",
             m.share_embeddings_and_output_weights, json, hf.tie_embeddings);
  m.share_embeddings_and_output_weights = hf.tie_embeddings;
  if (!ctx.given("model.max_position_embeddings")) m.max_position_embeddings = hf.max_seq_len;
}

void check_sft_dataset(const Context& ctx, const SftDatasetConfig& ds, const std::string& name, const ModelConfig& m) {
  const std::string p = "model.data." + name + ".";
  if (!ds.concat_sampling_probabilities.empty()) {
    if (ds.concat_sampling_probabilities.size() != ds.file_names.size())
      fail_key(ctx, p + "concat_sampling_probabilities",
               "has {} weights for {} files, expected one per file\n"
               "hint: one weight per entry of {}file_names, or null for equal weights",
               ds.concat_sampling_probabilities.size(), ds.file_names.size(), p);
    double sum = 0;
    for (double w : ds.concat_sampling_probabilities) {
      if (w < 0) fail_key(ctx, p + "concat_sampling_probabilities", "has weight {}, expected weights >= 0", w);
      sum += w;
    }
    if (std::abs(sum - 1.0) > 1e-6)
      fail_key(ctx, p + "concat_sampling_probabilities", "sums to {}, expected 1\nhint: normalize the weights", sum);
  }
  const std::string tail = "{" + ds.label_key + "}";
  const std::string& t = ds.prompt_template;
  if (t.size() <= tail.size() || t.compare(t.size() - tail.size(), tail.size(), tail) != 0)
    fail_key(ctx, p + "prompt_template",
             "got '{}', expected a prompt followed by {} at the end (the completion)\n"
             "hint: e.g. \"Question: {{question}}\\nAnswer: {}\"",
             t, tail, tail);
  try {
    data::validate_prompt_template(t.substr(0, t.size() - tail.size()));
  } catch (const Error& e) {
    fail_key(ctx, p + "prompt_template", "{}", e.what());
  }
  m.llama_config(0).check_seq_len(ds.max_seq_length, model_key_names(ctx, p + "max_seq_length"));
}

void check_data_prefix(const Context& ctx, const std::vector<std::string>& items, const char* part) {
  if (items.empty()) return;
  try {
    data::parse_data_prefix(items);
  } catch (const Error& e) {
    fail_key(ctx, "model.data.data_prefix", "{}{}", part, e.what());
  }
}

}  // namespace

std::string key_head(const Context& ctx, const std::string& key) { return key + " (" + ctx.where(key) + ")"; }

FieldNames model_key_names(const Context& ctx, const std::string& seq_len_key) {
  // field -> (its key, its name in a sentence)
  static const std::map<std::string, std::pair<std::string, std::string>> kKeys = {
      {"dim", {"model.hidden_size", "hidden_size"}},
      {"n_heads", {"model.num_attention_heads", "num_attention_heads"}},
      {"n_kv_heads", {"model.num_query_groups", "num_query_groups"}},
      {"ffn_dim", {"model.ffn_hidden_size", "ffn_hidden_size"}},
      {"n_layers", {"model.num_layers", "num_layers"}},
      {"max_seq_len", {"model.max_position_embeddings", "model.max_position_embeddings"}},
      {"tp_size", {"model.tensor_model_parallel_size", "tensor_model_parallel_size"}},
      {"pp_size", {"model.pipeline_model_parallel_size", "pipeline_model_parallel_size"}},
      {"first_stage_layers", {"model.num_layers_in_first_pipeline_stage", "model.num_layers_in_first_pipeline_stage"}},
      {"last_stage_layers", {"model.num_layers_in_last_pipeline_stage", "num_layers_in_last_pipeline_stage"}},
  };
  std::map<std::string, std::string> names;
  for (const auto& [field, key] : kKeys) names[field] = key.second;
  names["seq_len"] = seq_len_key;
  return FieldNames("", names, [&ctx, seq_len_key](const std::string& field) {
    const auto it = kKeys.find(field);
    return key_head(ctx, field == "seq_len" ? seq_len_key : it == kKeys.end() ? field : it->second.first);
  });
}

namespace {

// Adds "(file:line)" after the first key a lower-level message names (e.g. make_schedule's).
std::string locate(std::string msg, const Context& ctx) {
  std::smatch m;
  if (std::regex_search(msg, m, std::regex(R"(model\.optim\.[a-z_.]*[a-z_])")) && ctx.entries.count(m.str()))
    msg.insert(size_t(m.position() + m.length()), " (" + ctx.where(m.str()) + ")");
  return msg;
}

// The trainer's counts and the rank layout (parallel/layout.h's rule, in the config's words).
void validate_counts_and_layout(TrainConfig& cfg, const Context& ctx, std::vector<std::string>* notes) {
  TrainerConfig& t = cfg.trainer;
  ModelConfig& m = cfg.model;
  if (t.max_epochs && *t.max_epochs == -1) t.max_epochs.reset();
  if (t.max_epochs && *t.max_epochs == 0)
    fail_key(ctx, "trainer.max_epochs", "got 0, expected -1, null or a count >= 1");
  if (cfg.exp_manager.checkpoint_callback_params.save_top_k == 0)
    fail_key(ctx, "exp_manager.checkpoint_callback_params.save_top_k",
             "got 0, expected -1 (keep all) or K >= 1 (keep the newest K)\nhint: to write no checkpoints set "
             "exp_manager.create_checkpoint_callback=false");

  // Layout: the rank layout's rule (parallel/layout.h), in the config's words.
  parallel::ParallelLayout::check(
      int(cfg.world_size()), m.tensor_model_parallel_size, m.pipeline_model_parallel_size,
      FieldNames(
          "",
          {{"tp_size", "TP"},
           {"pp_size", "PP"},
           {"world_size", fmt::format("ranks (trainer.devices {} x trainer.num_nodes {})", t.devices, t.num_nodes)}},
          [&](const std::string& field) {
            return field == "pp_size" ? key_head(ctx, "model.pipeline_model_parallel_size")
                                      : key_head(ctx, "model.tensor_model_parallel_size");
          }));
  const int64_t dp = cfg.data_parallel_size();
  if (m.global_batch_size % (m.micro_batch_size * dp) != 0)
    fail_key(ctx, "model.global_batch_size",
             "got {}, expected a multiple of micro_batch_size {} x data-parallel size {} = {}\nhint: data-parallel "
             "size = devices x num_nodes / (TP x PP) = {} x {} / ({} x {})",
             m.global_batch_size, m.micro_batch_size, dp, m.micro_batch_size * dp, t.devices, t.num_nodes,
             m.tensor_model_parallel_size, m.pipeline_model_parallel_size);
  if (m.sequence_parallel && m.tensor_model_parallel_size == 1 && ctx.given("model.sequence_parallel"))
    notes->push_back("model.sequence_parallel has no effect with tensor_model_parallel_size 1");
  if (t.accelerator == "tpu")
    notes->push_back("trainer.accelerator tpu (an XLA device, as on Trainium) trains on the cpu here");
}

// The model's shape, tensor-parallel and pipeline rules (model/config.h, model/shard.h), in keys.
void validate_architecture(TrainConfig& cfg, const Context& ctx, std::vector<std::string>* notes) {
  ModelConfig& m = cfg.model;
  if (m.init_from) apply_init_from(cfg, ctx);
  // The model's shape, tensor-parallel and pipeline rules (model/config.h, model/shard.h), in keys.
  const FieldNames names = model_key_names(ctx);
  const model::LlamaConfig shape = m.llama_config(0);  // the vocabulary is the tokenizer's, known later
  shape.check_heads(names);
  const int head_dim = shape.head_dim();
  if (m.kv_channels && *m.kv_channels != head_dim)
    fail_key(ctx, "model.kv_channels",
             "got {}, expected null or hidden_size / num_attention_heads = {}\nhint: a head "
             "dim other than hidden/heads comes with model.init_from's config.json (head_dim)",
             *m.kv_channels, head_dim);
  model::check_tensor_parallel(shape, m.tensor_model_parallel_size, names);
  if ((m.num_layers_in_first_pipeline_stage || m.num_layers_in_last_pipeline_stage) &&
      m.pipeline_model_parallel_size == 1)
    notes->push_back("model.num_layers_in_*_pipeline_stage has no effect with pipeline_model_parallel_size 1");
  m.pipeline_layers(names);
  // model.freeze against the shape's Hugging Face names (preflight resolves it again with the vocabulary).
  if (!m.freeze.empty()) io::resolve_freeze(shape, m.freeze, "model.freeze (" + ctx.where("model.freeze") + ")");
  shape.check_seq_len(m.encoder_seq_length, model_key_names(ctx, "model.encoder_seq_length"));
  shape.check_seq_len(m.data.seq_length, model_key_names(ctx, "model.data.seq_length"));
  if (m.activations_checkpoint_granularity == "full" && !m.activations_checkpoint_method)
    fail_key(ctx, "model.activations_checkpoint_method", "is null with granularity full, expected uniform or block");
  if (m.activations_checkpoint_granularity == "full" && !m.activations_checkpoint_num_layers)
    fail_key(ctx, "model.activations_checkpoint_num_layers", "is null with granularity full, expected a count >= 1");
}

// AdamW's betas and the learning-rate schedule.
void validate_optimizer(TrainConfig& cfg, const Context& ctx, std::vector<std::string>* notes) {
  const TrainerConfig& t = cfg.trainer;
  ModelConfig& m = cfg.model;
  if (m.optim.betas.size() != 2 || !(m.optim.betas[0] >= 0 && m.optim.betas[0] < 1) ||
      !(m.optim.betas[1] >= 0 && m.optim.betas[1] < 1))
    fail_key(ctx, "model.optim.betas",
             "got {}, expected [beta1, beta2] with each in [0, 1)\nhint: Llama uses "
             "[0.9, 0.95]",
             Conv<std::vector<double>>::emit(m.optim.betas));
  try {
    cfg.lr_schedule();
  } catch (const Error& e) {
    fail("{}", locate(e.what(), ctx));
  }
  if (m.optim.sched.max_steps && *m.optim.sched.max_steps != t.max_steps)
    notes->push_back(fmt::format("model.optim.sched.max_steps {} differs from trainer.max_steps {}: the schedule runs "
                                 "over {} steps (NeMo would use trainer.max_steps)",
                                 *m.optim.sched.max_steps, t.max_steps, *m.optim.sched.max_steps));
}

// Pretraining's data_prefix and splits, or fine-tuning's JSONL datasets.
void validate_data(const TrainConfig& cfg, const Context& ctx) {
  const ModelConfig& m = cfg.model;
  if (m.data.fine_tuning) {
    if (m.data.train_ds.file_names.empty())
      fail_key(ctx, "model.data.train_ds.file_names",
               "is not set, expected JSONL files with model.data.fine_tuning "
               "true\nhint: model.data.train_ds.file_names=[/data/train.jsonl]");
    check_sft_dataset(ctx, m.data.train_ds, "train_ds", m);
    if (!m.data.validation_ds.file_names.empty()) check_sft_dataset(ctx, m.data.validation_ds, "validation_ds", m);
    if (!m.data.test_ds.file_names.empty()) check_sft_dataset(ctx, m.data.test_ds, "test_ds", m);
  } else {
    if (m.data.chat)
      fail_key(
          ctx, "model.data.chat",
          "is true while model.data.fine_tuning is false, expected chat rows to come with "
          "fine-tuning\nhint: set model.data.fine_tuning=true and the JSONL files in model.data.train_ds.file_names");
    if (m.data.data_prefix.train.empty())
      fail_key(ctx, "model.data.data_prefix",
               "is not set, expected [weight, prefix, ...] or [prefix, ...]\nhint: "
               "model.data.data_prefix=[1.0,/data/corpus_text_document] (the .bin/.idx path without extension), or "
               "model.data.fine_tuning=true for JSONL");
    check_data_prefix(ctx, m.data.data_prefix.train, m.data.data_prefix.per_split ? "train: " : "");
    check_data_prefix(ctx, m.data.data_prefix.validation, "validation: ");
    check_data_prefix(ctx, m.data.data_prefix.test, "test: ");
    if (!m.data.data_prefix.per_split) {
      try {
        data::parse_split_weights(m.data.splits_string);
      } catch (const Error& e) {
        fail_key(ctx, "model.data.splits_string", "{}", e.what());
      }
    }
  }
}

// The tokenizer the config names, where model.init_from does not bring one.
void validate_tokenizer(const TrainConfig& cfg, const Context& ctx) {
  const ModelConfig& m = cfg.model;
  const TokenizerConfig& tok = m.tokenizer;
  if (tok.library == "sentencepiece" && !tok.model && !m.init_from)
    fail_key(ctx, "model.tokenizer.model",
             "is not set, expected the tokenizer.model file (library sentencepiece)\n"
             "hint: model.tokenizer.model=/models/llama2/tokenizer.model, or model.init_from=<Hugging Face folder>");
  if (tok.library == "huggingface" && !tok.type && !m.init_from)
    fail_key(ctx, "model.tokenizer.type",
             "is not set, expected the model folder holding tokenizer.json or "
             "tokenizer.model (library huggingface)\nhint: model.tokenizer.type=/models/Llama-3.1-8B");
}

}  // namespace

void validate(TrainConfig& cfg, const Context& ctx, std::vector<std::string>* notes) {
  validate_counts_and_layout(cfg, ctx, notes);
  validate_architecture(cfg, ctx, notes);
  validate_optimizer(cfg, ctx, notes);
  validate_data(cfg, ctx);
  validate_tokenizer(cfg, ctx);
}

}  // namespace llamatrain::train::config_detail
