// The schema table (build_schema): every key with its type, default, allowed values and a one-line
// doc, in the order help text, the docs reference and to_yaml() list them; the only list of keys.
// Keys are bound to a TrainConfig field (key, ours), ignored, restricted to fixed values (only) or
// aliases. Also the entry and schema-row helpers of config_schema.h. Parsing a value is the
// converters' (config_convert.h); what the loader does with the table is in config_load.cpp.
#include "config/config_schema.h"

#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "config/config_convert.h"

namespace llamatrain::train::config_detail {

// ---------------------------------------------------------------------------------------------
// Entries: one per key, after flattening.

void set_entry(Entries& entries, const std::string& path, Entry e) {
  entries.erase(path);
  entries.emplace(path, std::move(e));
}

bool is_missing(const YAML::Node& n) { return n.IsScalar() && n.Scalar() == "???"; }

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  std::string s = n.Scalar();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return "'" + s + "'";
}

std::string last_component(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}
std::string parent_of(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}
std::string join_path(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

std::string where_of(const std::string& source, const YAML::Mark& m) {
  if (m.is_null()) return source;
  return fmt::format("{}:{}:{}", source, m.line + 1, m.column + 1);
}

// ---------------------------------------------------------------------------------------------
// Schema rows.

void Field::bad(const std::string& expected, const std::string& hint) const {
  std::string via = entry.interp.empty() ? "" : fmt::format(" (resolved from '{}')", entry.interp);
  fail("{} ({}): got {}{}, expected {}\nhint: {}", spec.info.path, entry.where, describe(entry.node), via, expected,
       hint.empty() ? std::string(kHelpHint) : hint);
}

std::string format_double(double v) { return fmt::format("{}", v); }

std::string limits_text(const Limits& l, bool integer) {
  auto num = [&](double v) { return integer ? fmt::format("{}", int64_t(v)) : format_double(v); };
  if (l.lo == -kInf && l.hi == kInf) return "";
  if (l.hi == kInf) return fmt::format("{} {}", l.lo_open ? ">" : ">=", num(l.lo));
  return fmt::format("{}{}, {}]", l.lo_open ? "(" : "[", num(l.lo), num(l.hi));
}

std::vector<std::string> split_choices(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t bar = s.find('|', start);
    if (bar == std::string::npos) bar = s.size();
    out.push_back(s.substr(start, bar - start));
    start = bar + 1;
  }
  return out;
}

std::string choices_text(const std::string& choices) {
  std::string out;
  for (const auto& c : split_choices(choices)) out += (out.empty() ? "" : ", ") + c;
  return out;
}

// ---------------------------------------------------------------------------------------------
// The schema table.

template <class F>
void Schema::key(const std::string& path, F field, const std::string& def, const std::string& doc, Limits lim,
                 const std::string& choices, Status status) {
  using T = std::remove_pointer_t<std::invoke_result_t<F, TrainConfig&>>;
  Spec s;
  s.info.path = path;
  s.info.type = Conv<T>::type();
  s.info.default_value = def;
  s.info.doc = doc;
  s.info.status = status;
  s.lim = lim;
  s.choices = choices;
  if (!choices.empty())
    s.info.allowed = choices_text(choices);
  else
    s.info.allowed = limits_text(lim, std::is_integral_v<T> || std::is_same_v<T, std::optional<int>> ||
                                          std::is_same_v<T, std::optional<int64_t>>);
  s.can_be_unset = kCanBeUnset<T>;
  s.set = [field](TrainConfig& c, const Field& f) {
    T v = Conv<T>::parse(f);
    check_value(f, v);
    *field(c) = std::move(v);
  };
  s.emit = [field](const TrainConfig& c) { return Conv<T>::emit(*field(const_cast<TrainConfig&>(c))); };
  add(std::move(s));
}

namespace {

#define FIELD(member) [](TrainConfig& c) { return &c.member; }

Limits at_least(double lo) { return {lo, kInf, false}; }
Limits positive() { return {0, kInf, true}; }
Limits range(double lo, double hi) { return {lo, hi, false}; }

void add_sft_dataset(Schema& s, const std::string& ds, SftDatasetConfig DataConfig::*member) {
  const std::string p = "model.data." + ds + ".";
  const bool train = ds == "train_ds";
  auto from_train = [&](const std::string& k, const std::string& train_default) {
    return train ? train_default : "${model.data.train_ds." + k + "}";
  };
#define DS(field) [member](TrainConfig& c) { return &(c.model.data.*member).field; }
  s.key(p + "file_names", DS(file_names), "null",
        train ? "JSONL files of (prompt, completion) rows; required when model.data.fine_tuning is true"
              : "JSONL files of the same form; null: no " + std::string(ds == "test_ds" ? "test" : "validation") +
                    " set");
  s.key(p + "shuffle", DS(shuffle), train ? "true" : "false", "shuffle the examples every epoch");
  s.key(p + "max_seq_length", DS(max_seq_length), "${model.encoder_seq_length}",
        "tokens per sample; longer examples are truncated (prompt first)", at_least(1));
  s.only(p + "min_seq_length", "1", "examples are never dropped for being short");
  s.key(p + "drop_last", DS(drop_last), train ? "true" : "false", "drop the last incomplete global batch");
  s.key(p + "concat_sampling_probabilities", DS(concat_sampling_probabilities), "null",
        "sampling weight of each file (same length as file_names, sums to 1); null: files weighted equally");
  s.key(p + "label_key", DS(label_key), from_train("label_key", "output"),
        "the row field holding the completion (the loss covers only it and EOS)");
  s.key(p + "add_bos", DS(add_bos), from_train("add_bos", "false"), "prepend BOS to every example");
  s.key(p + "add_eos", DS(add_eos), from_train("add_eos", "true"), "append EOS to every example");
  s.only(p + "add_sep", "false", "no separator token is inserted between prompt and completion");
  s.key(p + "prompt_template", DS(prompt_template), from_train("prompt_template", "\"{input} {output}\""),
        "{field} placeholders filled from the row; must end with {<label_key>}, the completion");
  s.key(p + "truncation_method", DS(truncation_method), from_train("truncation_method", "right"),
        "which end of an over-long prompt is cut: right keeps its beginning", {}, "right|left");
  s.ours(
      p + "completion_map", DS(completion_map), from_train("completion_map", "{}"),
      "map from the label's text to the completion, e.g. {entailment: yes, not_entailment: no}; {}: the label as is");
  s.ours(p + "pack", DS(pack), from_train("pack", "false"),
         "pack consecutive examples into one sample instead of padding each (positions restart and attention "
         "stops at each example)");
#undef DS
  s.ignored(p + "truncation_field", "the prompt is what gets truncated, whichever field it came from");
  for (const char* k : {"global_batch_size", "micro_batch_size", "num_workers", "memmap_workers", "pin_memory",
                        "index_mapping_dir", "hf_dataset", "names", "global_sample_mapping"})
    s.ignored(p + k, "batch sizes come from model.*; data loading is in-process");
  if (!train) {
    for (const char* k : {"write_predictions_to_file", "output_file_path_prefix", "tokens_to_generate", "metric"})
      s.ignored(p + k, "validation reports the loss only");
  }
}

Schema build_schema() {
  Schema s;
  // Root.
  s.key("name", FIELD(name), "megatron_llama", "experiment name");
  s.only("restore_from_path", "null",
         ".nemo archives are not read; start from Hugging Face weights with model.init_from or resume with "
         "model.resume_from_checkpoint");
  s.key("convert_to_hf", FIELD(convert_to_hf), "false", "write a Hugging Face checkpoint at the end of training");
  s.ignored("enable_recovery_time_instrumentation", "Neuron timing traces");
  s.ignored("async_checkpointing", "checkpoints are written synchronously");
  s.ignored("enable_checkpoint_removal_protection",
            "always on: an old checkpoint is removed only after the new one is complete");

  // trainer.
  s.key("trainer.devices", FIELD(trainer.devices), "1", "processes per node", range(1, 1 << 20));
  s.key("trainer.num_nodes", FIELD(trainer.num_nodes), "1", "nodes", range(1, 1 << 20));
  s.key("trainer.precision", FIELD(trainer.precision), "32",
        "32 or fp32: fp32 everywhere; bf16-mixed: bf16 matmul operands, fp32 master weights and Adam states; "
        "bf16: bf16 weights and Adam states, every update rounded stochastically (what bf16 means on Trainium)",
        {}, "32|fp32|32-true|bf16-mixed|bf16|bf16-sr");
  s.key("trainer.max_steps", FIELD(trainer.max_steps), "100000",
        "optimizer steps; also sizes the training data (max_steps x global_batch_size samples)", at_least(1));
  s.key("trainer.max_epochs", FIELD(trainer.max_epochs), "-1",
        "passes over the data before stopping (fine-tuning); -1 or null: max_steps alone ends training", at_least(-1));
  s.key("trainer.log_every_n_steps", FIELD(trainer.log_every_n_steps), "10", "steps between log lines", at_least(1));
  s.key("trainer.val_check_interval", FIELD(trainer.val_check_interval), "100",
        "steps between validations (an integer; NeMo's epoch fractions are not supported)", at_least(1));
  s.key("trainer.limit_val_batches", FIELD(trainer.limit_val_batches), "50", "global batches per validation",
        at_least(0));
  s.key("trainer.limit_test_batches", FIELD(trainer.limit_test_batches), "500", "global batches of the test run",
        at_least(0));
  s.only("trainer.accumulate_grad_batches", "1",
         "gradient accumulation follows from global_batch_size / (micro_batch_size x data-parallel size)");
  s.key("trainer.gradient_clip_val", FIELD(trainer.gradient_clip_val), "1.0",
        "clip the global gradient L2 norm to this; 0 or null: no clipping", at_least(0));
  s.ours("trainer.max_consecutive_nonfinite", FIELD(trainer.max_consecutive_nonfinite), "3",
         "a step whose loss or gradient norm is not finite is skipped (no update); after this many in a row the "
         "run goes back to the last checkpoint; 0: stop at the first",
         at_least(0));
  s.ours("trainer.max_consecutive_rollbacks", FIELD(trainer.max_consecutive_rollbacks), "3",
         "rollbacks with no new checkpoint saved between them; a run that diverges once more stops with a "
         "divergence error, its checkpoints as they were; 0: never roll back",
         at_least(0));
  s.key("trainer.accelerator", FIELD(trainer.accelerator), "cpu",
        "where the model trains: cpu; gpu or cuda (NVIDIA GPUs: one per rank, its local rank's; data parallelism "
        "only); auto (a GPU where one is usable, else cpu, said in a note); ref (the reference kernels: slow, for "
        "checking results); tpu, from configs written for XLA devices, trains on the cpu",
        {}, "cpu|gpu|cuda|auto|ref|tpu");
  for (const char* k : {"logger", "enable_checkpointing", "replace_sampler_ddp", "use_distributed_sampler", "benchmark",
                        "enable_model_summary", "num_sanity_val_steps"})
    s.ignored(std::string("trainer.") + k, "Lightning setting with no counterpart here");

  // exp_manager.
  s.key("exp_manager.exp_dir", FIELD(exp_manager.exp_dir), "null", "root of the log folders; null: ./nemo_experiments");
  s.key("exp_manager.name", FIELD(exp_manager.name), "${name}", "second component of the log folder");
  s.key("exp_manager.explicit_log_dir", FIELD(exp_manager.explicit_log_dir), "null",
        "log folder used as is, instead of exp_dir/name/version");
  s.key("exp_manager.version", FIELD(exp_manager.version), "null",
        "third component of the log folder; null: NEMO_EXPM_VERSION, else the start time");
  s.key("exp_manager.resume_if_exists", FIELD(exp_manager.resume_if_exists), "true",
        "resume from the newest checkpoint in the log folder");
  s.key("exp_manager.resume_ignore_no_checkpoint", FIELD(exp_manager.resume_ignore_no_checkpoint), "true",
        "with resume_if_exists: start fresh when there is no checkpoint instead of failing");
  s.key("exp_manager.create_tensorboard_logger", FIELD(exp_manager.create_tensorboard_logger), "true",
        "write TensorBoard event files");
  s.key("exp_manager.create_checkpoint_callback", FIELD(exp_manager.create_checkpoint_callback), "true",
        "write checkpoints");
  s.ignored("exp_manager.log_local_rank_0_only", "per-rank logs are prefixed by rank");
  s.only("exp_manager.create_wandb_logger", "false",
         "Weights & Biases is not available; TensorBoard files are written");
  s.ignored("exp_manager.wandb_logger_kwargs", "Weights & Biases is not available");
  s.only("exp_manager.create_early_stopping_callback", "false", "early stopping is not implemented");
  s.ignored("exp_manager.early_stopping_callback_params", "early stopping is not implemented");
  const std::string ck = "exp_manager.checkpoint_callback_params.";
  s.key(ck + "save_top_k", FIELD(exp_manager.checkpoint_callback_params.save_top_k), "1",
        "keep the newest K checkpoints (checkpoints are ranked by step); -1: keep all", at_least(-1));
  s.key(ck + "every_n_train_steps", FIELD(exp_manager.checkpoint_callback_params.every_n_train_steps), "null",
        "save every N optimizer steps; null: only at the end of training and on a stop signal", at_least(1));
  s.key(ck + "train_time_interval", FIELD(exp_manager.checkpoint_callback_params.train_time_interval), "null",
        "also save when this many seconds passed since the last save", positive());
  s.key(ck + "save_last", FIELD(exp_manager.checkpoint_callback_params.save_last), "false",
        "also save a -last checkpoint at the end of training");
  s.key(ck + "filename", FIELD(exp_manager.checkpoint_callback_params.filename), "${name}--{step}-{consumed_samples}",
        "checkpoint name pattern; {step} and {consumed_samples} are filled in");
  s.key(ck + "dirpath", FIELD(exp_manager.checkpoint_callback_params.dirpath), "null",
        "checkpoint folder; null: <log folder>/checkpoints");
  s.key(ck + "async_save", FIELD(exp_manager.checkpoint_callback_params.async_save), "null",
        "write checkpoints behind the next training steps: the state is copied to host memory (the only "
        "pause; plan counts the copy), a writer thread writes, fsyncs and commits it; one save at a time. "
        "null: on where every rank's copy fits beside its steps in its share of the node's free memory with "
        "a fifth of it left (train decides at its start and says so; plan predicts it)");
  s.only(ck + "monitor", "step", "checkpoints are ranked by step: save_top_k keeps the newest K");
  s.only(ck + "mode", "max", "checkpoints are ranked by step: save_top_k keeps the newest K");
  s.only(ck + "always_save_nemo", "false", ".nemo archives are not written; convert_to_hf exports Hugging Face files");
  s.only(ck + "save_nemo_on_train_end", "false",
         ".nemo archives are not written; convert_to_hf exports Hugging Face files");
  s.only(ck + "save_weights_only", "false", "checkpoints always hold the optimizer state too");
  s.ignored(ck + "model_parallel_size", "derived from the layout");
  s.ignored(ck + "every_n_epochs", "saving follows steps");

  // model: batch and layout.
  s.key("model.micro_batch_size", FIELD(model.micro_batch_size), "4", "sequences per rank per forward/backward",
        at_least(1));
  s.key("model.global_batch_size", FIELD(model.global_batch_size), "8",
        "sequences per optimizer step; a multiple of micro_batch_size x data-parallel size", at_least(1));
  s.key("model.tensor_model_parallel_size", FIELD(model.tensor_model_parallel_size), "1", "tensor-parallel ranks (TP)",
        range(1, 1024));
  s.key("model.pipeline_model_parallel_size", FIELD(model.pipeline_model_parallel_size), "1", "pipeline stages (PP)",
        range(1, 1024));
  s.key("model.num_layers_in_first_pipeline_stage", FIELD(model.num_layers_in_first_pipeline_stage), "null",
        "layers of the first pipeline stage (it also holds the embedding); null: an even share", at_least(1));
  s.key("model.num_layers_in_last_pipeline_stage", FIELD(model.num_layers_in_last_pipeline_stage), "null",
        "layers of the last pipeline stage (it also holds the lm head and loss); null: an even share", at_least(1));
  s.only("model.virtual_pipeline_model_parallel_size", "null|1", "interleaved pipeline stages are not implemented");
  s.only("model.context_parallel_size", "null|1", "context parallelism is not implemented");
  s.key("model.sequence_parallel", FIELD(model.sequence_parallel), "true",
        "shard norms along the sequence inside tensor-parallel groups (no effect with TP 1)");
  s.ours("model.distributed_optimizer", FIELD(model.distributed_optimizer), "false",
         "shard the optimizer state over data-parallel ranks (ZeRO-1); Neuron's wrap_with_zero and "
         "model.optim.distributed_optimizer are accepted too");
  s.alias("model.wrap_with_zero", "model.distributed_optimizer");
  s.ignored("model.zero_use_master_weight", "master weights follow trainer.precision");
  s.ignored("model.zero_use_fp32_grad_accum", "gradients accumulate in fp32 in every precision");

  // model: architecture.
  s.key("model.encoder_seq_length", FIELD(model.encoder_seq_length), "512", "training sequence length",
        range(1, 1 << 24));
  s.key("model.max_position_embeddings", FIELD(model.max_position_embeddings), "${.encoder_seq_length}",
        "longest sequence the RoPE tables cover; with init_from and unset: config.json's", range(1, 1 << 24));
  s.key("model.num_layers", FIELD(model.num_layers), "12", "transformer layers (L)", range(1, 4096));
  s.key("model.hidden_size", FIELD(model.hidden_size), "768", "model width (C)", range(1, 1 << 16));
  s.key("model.ffn_hidden_size", FIELD(model.ffn_hidden_size), "3072", "SwiGLU inner width (F)", range(1, 1 << 20));
  s.key("model.num_attention_heads", FIELD(model.num_attention_heads), "12", "query heads (H)", range(1, 1 << 16));
  s.key("model.num_query_groups", FIELD(model.num_query_groups), "null",
        "key/value heads for grouped-query attention (Hkv); null: num_attention_heads", range(1, 1 << 16));
  s.alias("model.num_kv_heads", "model.num_query_groups");
  s.key("model.kv_channels", FIELD(model.kv_channels), "null",
        "head dim; null or hidden_size / num_attention_heads (another one comes with model.init_from's head_dim)",
        range(1, 1 << 16));
  s.key("model.init_method_std", FIELD(model.init_method_std), "0.02", "std of the normal initialization", positive());
  s.key("model.use_scaled_init_method", FIELD(model.use_scaled_init_method), "true",
        "output projections (o_proj, down_proj) use std / sqrt(2 x num_layers)");
  s.key("model.layernorm_epsilon", FIELD(model.layernorm_epsilon), "1e-5", "RMSNorm epsilon", {0, 1, true});
  s.key("model.rotary_base", FIELD(model.rotary_base), "10000",
        "RoPE theta; Neuron's position_freq_base is accepted too", positive());
  s.alias("model.position_freq_base", "model.rotary_base");
  s.key("model.share_embeddings_and_output_weights", FIELD(model.share_embeddings_and_output_weights), "false",
        "tie the lm head to the token embedding");
  s.key("model.make_vocab_size_divisible_by", FIELD(model.make_vocab_size_divisible_by), "8",
        "the embedding and lm head hold the vocabulary padded to a multiple of this x TP rows; the padding rows are "
        "inert (zero, no logit, no gradient), left out of checkpoints and exports, and padded again for the layout "
        "that resumes",
        range(1, 1 << 16));
  s.key("model.seed", FIELD(model.seed), "1234", "seed of initialization, data order and stochastic rounding",
        range(0, 4294967295.0));
  s.key("model.activations_checkpoint_granularity", FIELD(model.activations_checkpoint_granularity), "selective",
        "recompute activations in backward: null (none), selective (attention core) or full (whole layers)", {},
        "selective|full");
  s.key("model.activations_checkpoint_method", FIELD(model.activations_checkpoint_method), "uniform",
        "with full: uniform (every num_layers-th layer input kept) or block (first num_layers layers per stage)", {},
        "uniform|block");
  s.key("model.activations_checkpoint_num_layers", FIELD(model.activations_checkpoint_num_layers), "1",
        "layers per recomputed group (uniform) or recomputed layers per stage (block)", at_least(1));
  s.key("model.resume_from_checkpoint", FIELD(model.resume_from_checkpoint), "null",
        "a checkpoint folder to load (weights, optimizer, step, data position)");
  s.ours("model.init_from", FIELD(model.init_from), "null",
         "a Hugging Face folder (config.json, safetensors or pytorch_model.bin, tokenizer.model) to start from; the "
         "architecture then comes from its config.json and model shape keys must agree with it or be absent");
  s.ours("model.new_token_init", FIELD(model.new_token_init), "subword_mean",
         "with init_from and a tokenizer with more pieces than its vocab_size: the new embedding and output rows; "
         "subword_mean (each the mean of the rows of the pieces init_from's tokenizer.model splits its text into), "
         "mean (the mean of all rows) or normal (N(0, init_method_std))",
         {}, "subword_mean|mean|normal");
  s.alias("model.convert_to_hf", "convert_to_hf");
  s.key("model.output_dir", FIELD(model.output_dir), "null",
        "where convert_to_hf writes the Hugging Face checkpoint; null: chosen by the trainer under the log folder");
  s.ignored("model.config_path", "the exported config.json is written from the model itself");
  s.ours(
      "model.freeze", FIELD(model.freeze), "[]",
      "Hugging Face parameter names (fnmatch patterns; * also matches dots) of tensors that do not train, "
      "optionally with a row range: unchanged weights, no optimizer state, and for whole tensors no "
      "gradient; e.g. [model.layers.*, model.norm.weight], [model.layers.0.*], [\"model.embed_tokens.weight[:32000]\"] "
      "(a row range quoted: YAML reads brackets as a list)");
  s.ours("model.freeze_base_vocab", FIELD(model.freeze_base_vocab), "false",
         "with init_from and a tokenizer of more pieces: the embedding and output rows init_from had do not "
         "train, only the new ones (and what else is not frozen)");
  for (const char* k : {"hidden_dropout", "attention_dropout", "ffn_dropout"})
    s.only(std::string("model.") + k, "0", "dropout is not implemented (Llama pretraining uses none)");
  s.only("model.normalization", "rmsnorm", "Llama uses RMSNorm; layernorm is not implemented");
  s.only("model.position_embedding_type", "rope", "Llama uses rotary position embeddings");
  s.only("model.rotary_percentage", "1", "RoPE rotates the whole head dim");
  s.only("model.position_abf_factor", "1", "RoPE base scaling is not implemented; set model.rotary_base instead");
  s.only("model.positition_interpolation_factor", "1", "RoPE position interpolation is not implemented");
  s.only("model.sliding_window_size", "null",
         "a sliding window comes from model.init_from's config.json (Mistral's sliding_window); otherwise attention is "
         "full causal");
  s.only("model.activation", "swiglu", "Llama's MLP is SwiGLU");
  s.only("model.transformer_block_type", "pre_ln", "Llama blocks are pre-norm");
  s.only("model.has_bias", "false",
         "Llama has no biases; Qwen2's q/k/v biases come with model.init_from's config.json");
  s.only("model.bias", "false", "Llama has no biases; Qwen2's q/k/v biases come with model.init_from's config.json");
  s.only("model.do_layer_norm_weight_decay", "false", "norm weights never get weight decay here");
  s.only("model.pre_process", "true", "every model has its embedding");
  s.only("model.post_process", "true", "every model has its lm head");
  s.only("model.answer_only_loss", "true", "fine-tuning loss always covers only the completion");
  s.only("model.flexible_pipeline_parallel_stages", "null", "layers are split evenly over pipeline stages");
  s.only("model.num_micro_batches_with_partial_activation_checkpoints", "null",
         "partial activation checkpointing is not implemented");
  s.only("model.activations_checkpoint_layers_per_pipeline", "null",
         "partial activation checkpointing is not implemented");
  s.only("model.fp8", "false", "fp8 is not implemented");
  for (const char* k : {"fp8_e4m3", "fp8_hybrid", "fp8_margin", "fp8_interval", "fp8_amax_history_len",
                        "fp8_amax_compute_algo", "transformer_engine", "use_emha"})
    s.ignored(std::string("model.") + k, "GPU library switch");
  for (const char* k : {"apply_query_key_layer_scaling",
                        "persist_layer_norm",
                        "native_amp_init_scale",
                        "native_amp_growth_interval",
                        "hysteresis",
                        "fp32_residual_connection",
                        "fp16_lm_cross_entropy",
                        "grad_allreduce_chunk_size_mb",
                        "grad_div_ar_fusion",
                        "gradient_accumulation_fusion",
                        "bias_activation_fusion",
                        "bias_dropout_add_fusion",
                        "masked_softmax_fusion",
                        "use_cpu_initialization",
                        "onnx_safe",
                        "apex_transformer_log_level",
                        "gradient_as_bucket_view",
                        "sync_batch_comm",
                        "disable_layer_norm_checkpointing",
                        "use_flash_attention"})
    s.ignored(std::string("model.") + k, "a fusion, fp16 or framework switch; the computation is the same here");
  s.ignored("model.megatron_amp_O2", "precision comes from trainer.precision");
  for (const char* k : {"log_parameter_norm", "log_gradient_norm"})
    s.ignored(std::string("model.") + k, "the gradient norm is always logged");
  for (const char* k : {"save_xser", "load_xser", "force_dump_checkpoint", "save_logits"})
    s.ignored(std::string("model.") + k, "checkpoints are written in llamatrain's own format");
  s.ignored("model.nsys_profile", "Nsight profiling is not wired");

  // model.tokenizer.
  s.key("model.tokenizer.library", FIELD(model.tokenizer.library), "sentencepiece",
        "sentencepiece: tokenizer.model is the file; huggingface: tokenizer.type is the model folder (its "
        "tokenizer.json, else its tokenizer.model) or a tokenizer.json file",
        {}, "sentencepiece|huggingface");
  s.key("model.tokenizer.type", FIELD(model.tokenizer.type), "null",
        "huggingface: the model folder holding tokenizer.json (read natively) or tokenizer.model");
  s.key("model.tokenizer.model", FIELD(model.tokenizer.model), "null", "sentencepiece: the tokenizer.model file");
  for (const char* k : {"vocab_file", "merge_file", "delimiter", "sentencepiece_legacy", "use_fast"})
    s.ignored(std::string("model.tokenizer.") + k, "the tokenizer is read from tokenizer.model or tokenizer.json");

  // model.data.
  s.key("model.data.data_prefix", FIELD(model.data.data_prefix), "???",
        "[weight, prefix, ...], [prefix, ...] or {train: [...], validation: [...], test: [...]}; a prefix is the "
        ".bin/.idx path without extension; required unless fine_tuning. The list form cuts every file by "
        "`splits_string`; the mapping gives each split its own blend of whole files (Megatron's per-split blend; "
        "`splits_string` is not used, a split left out has no data). A validation split that blends several files "
        "reports each file's figures too, named from the file or by NAME:prefix ([training.md](training.md#steps))");
  s.key("model.data.index_mapping_dir", FIELD(model.data.index_mapping_dir), "null",
        "folder of the sample-index cache; null: next to the data");
  s.key("model.data.splits_string", FIELD(model.data.splits_string), "980,10,10",
        "train,valid,test weights of the documents");
  s.key("model.data.seq_length", FIELD(model.data.seq_length), "${model.encoder_seq_length}",
        "tokens per training sample", range(1, 1 << 24));
  s.key("model.data.reset_position_ids", FIELD(model.data.reset_position_ids), "false",
        "restart positions after each end-of-document token");
  s.key("model.data.reset_attention_mask", FIELD(model.data.reset_attention_mask), "false",
        "documents attend to themselves only: attention stops after each end-of-document token");
  s.key("model.data.eod_mask_loss", FIELD(model.data.eod_mask_loss), "false",
        "no loss on predictions made from an end-of-document token");
  s.key("model.data.validation_drop_last", FIELD(model.data.validation_drop_last), "true",
        "drop the last partial validation sample");
  s.key("model.data.fine_tuning", FIELD(model.data.fine_tuning), "false",
        "train on JSONL (train_ds, validation_ds, test_ds) instead of data_prefix");
  s.only("model.data.data_impl", "mmap", "datasets are Megatron mmap .bin/.idx files");
  s.only("model.data.dataloader_type", "single",
         "samples are consumed in order (MegatronPretrainingSampler); cyclic is not implemented");
  s.only("model.data.no_seqlen_plus_one_input_tokens", "false", "samples always read seq_length + 1 tokens");
  s.only("model.data.pad_samples_to_global_batch_size", "false", "partial global batches are dropped");
  s.key("model.data.chat", FIELD(model.data.chat), "false",
        "fine-tuning rows are conversations ({messages: [{role, content}]}, with tools, tool calls and tool results "
        "where the template renders them; ShareGPT {conversations}) or Alpaca records ({instruction, input, output}), "
        "rendered with model.data.chat_template; the loss covers the assistant turns");
  s.ours("model.data.chat_template", FIELD(model.data.chat_template), "auto",
         "template of model.data.chat rows: auto (the chat_template of the tokenizer's tokenizer_config.json, "
         "recognised), llama2 (Llama 2 chat, [INST]), llama3 (Llama 3 header tokens), chatml (Qwen2.5's ChatML, "
         "with its default system turn and tools), chatml_plain (ChatML without a default system turn or tools), "
         "qwen3 (Qwen3's ChatML: <think> reasoning blocks as its template renders them, tools)",
         {}, "auto|llama2|llama3|chatml|chatml_plain|qwen3");
  s.ignored("model.data.skip_warmup", "datasets are mmapped without warm-up");
  s.ignored("model.data.num_workers", "data loading is in-process");
  add_sft_dataset(s, "train_ds", &DataConfig::train_ds);
  add_sft_dataset(s, "validation_ds", &DataConfig::validation_ds);
  add_sft_dataset(s, "test_ds", &DataConfig::test_ds);

  // model.optim.
  s.key("model.optim.name", FIELD(model.optim.name), "adamw",
        "AdamW (decoupled weight decay); fused_adam is the same update", {}, "adamw|fused_adam");
  s.key("model.optim.lr", FIELD(model.optim.lr), "2e-4", "peak learning rate", positive());
  s.key("model.optim.weight_decay", FIELD(model.optim.weight_decay), "0.01",
        "AdamW weight decay (not applied to norm weights)", at_least(0));
  s.key("model.optim.betas", FIELD(model.optim.betas), "[0.9, 0.98]", "Adam [beta1, beta2], each in [0, 1)");
  s.key("model.optim.eps", FIELD(model.optim.eps), "1e-8", "Adam epsilon", positive());
  s.ours("model.optim.embedding_lr", FIELD(model.optim.embedding_lr), "null",
         "peak learning rate of the embedding and the output layer; their rate each step is lr's times "
         "embedding_lr / lr (warmup, decay and min_lr scaled alike); null: lr. A grown vocabulary's new rows often "
         "take a larger one",
         positive());
  s.alias("model.optim.distributed_optimizer", "model.distributed_optimizer");
  s.ours("model.optim.overlap_grad_sync", FIELD(model.overlap_grad_sync), "false",
         "data parallelism without ZeRO-1: all-reduce gradient buckets while the backward of a step's last "
         "micro-batch goes on, in the order it completes them (false: all of them after it, with blocking "
         "all-reduces; faster where ranks share a machine's cores)");
  s.ignored("model.optim.capturable", "a CUDA-graph switch of torch's AdamW");
  const std::string sc = "model.optim.sched.";
  s.key(sc + "name", FIELD(model.optim.sched.name), "CosineAnnealing",
        "CosineAnnealing, WarmupAnnealing (linear decay), WarmupPolicy (warmup then constant), WarmupHoldPolicy, WSD "
        "(warmup-stable-decay, Megatron-core) or none (constant lr)",
        {}, "CosineAnnealing|WarmupAnnealing|WarmupPolicy|WarmupHoldPolicy|WSD|none");
  s.key(sc + "warmup_steps", FIELD(model.optim.sched.warmup_steps), "null",
        "linear warmup steps; null: none (NeMo's Llama YAML uses 500)", at_least(0));
  s.key(sc + "warmup_ratio", FIELD(model.optim.sched.warmup_ratio), "null",
        "warmup as a fraction of max_steps (instead of warmup_steps)", range(0, 1));
  s.key(sc + "constant_steps", FIELD(model.optim.sched.constant_steps), "null",
        "CosineAnnealing: steps at min_lr at the end; null: 0 (NeMo's Llama YAML uses 50000)", at_least(0));
  s.key(sc + "constant_ratio", FIELD(model.optim.sched.constant_ratio), "null",
        "CosineAnnealing: constant_steps as a fraction of max_steps", range(0, 1));
  s.key(sc + "hold_steps", FIELD(model.optim.sched.hold_steps), "null",
        "WarmupHoldPolicy: steps at the peak after warmup", at_least(0));
  s.key(sc + "hold_ratio", FIELD(model.optim.sched.hold_ratio), "null", "WarmupHoldPolicy: hold_steps as a fraction",
        range(0, 1));
  s.key(sc + "min_lr", FIELD(model.optim.sched.min_lr), "0", "floor of the decay, and the lr after max_steps",
        at_least(0));
  s.key(sc + "max_steps", FIELD(model.optim.sched.max_steps), "null",
        "length of the schedule; null: trainer.max_steps (NeMo always uses trainer.max_steps)", at_least(1));
  s.ours(sc + "wsd_decay_steps", FIELD(model.optim.sched.wsd_decay_steps), "null",
         "WSD: length of the final decay (Megatron-core's lr_wsd_decay_iters)", at_least(1));
  s.ours(sc + "wsd_decay_style", FIELD(model.optim.sched.wsd_decay_style), "exponential",
         "WSD: shape of the final decay (Megatron-core's lr_wsd_decay_style)", {},
         "exponential|linear|cosine|minus_sqrt");
  s.ignored(sc + "monitor", "the schedule depends on the step only");
  s.only(sc + "reduce_on_plateau", "false", "the schedule depends on the step only");
  return s;
}
#undef FIELD

}  // namespace

const Schema& schema() {
  static const Schema s = build_schema();
  return s;
}

}  // namespace llamatrain::train::config_detail
