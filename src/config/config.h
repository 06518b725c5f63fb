// The trainer's configuration: a YAML file with the key names of NeMo's megatron_llama_config.yaml,
// plus Hydra-style `key=value` overrides, resolved into a typed TrainConfig. One schema table
// (config_schema.cpp) lists every key with its type, default, allowed values and a one-line doc, and drives
// parsing, validation, help text and to_yaml(). NeMo keys that change nothing here are accepted and
// reported as notes; NeMo values we cannot honour are Errors that say why. Interpolations `${.x}`,
// `${a.b}` and `${multiply:...}` resolve after the overrides, as in OmegaConf. Defaults are the values
// of NeMo's Llama YAML unless the schema doc says otherwise; a TrainConfig only comes from load_config.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/names.h"
#include "data/blend.h"
#include "data/sft.h"
#include "model/config.h"
#include "model/llama.h"
#include "config/schedule.h"

namespace llamatrain::train {

struct TrainerConfig {
  int devices = 0;  // processes per node
  int num_nodes = 0;
  model::Precision precision = model::Precision::fp32;  // 32 | bf16-mixed | bf16 (stochastic rounding)
  std::string accelerator = "cpu";    // cpu | gpu (cuda) | auto | ref; tpu (XLA configs) trains on the cpu
  int64_t max_steps = 0;              // optimizer steps
  std::optional<int64_t> max_epochs;  // null (NeMo's -1): max_steps ends training
  int64_t log_every_n_steps = 0;
  int64_t val_check_interval = 0;  // steps between validations
  int64_t limit_val_batches = 0;   // global batches per validation
  int64_t limit_test_batches = 0;
  std::optional<double> gradient_clip_val;  // global L2 norm; null or 0 = no clipping
  int64_t max_consecutive_nonfinite = 0;    // ours: non-finite steps skipped in a row before rollback
  int64_t max_consecutive_rollbacks = 0;    // ours: rollbacks with no checkpoint saved between them

  bool operator==(const TrainerConfig&) const = default;
};

struct CheckpointCallbackParams {
  int64_t save_top_k = 0;  // newest K checkpoints kept; -1 keeps all
  std::optional<int64_t> every_n_train_steps;
  std::optional<double> train_time_interval;  // seconds
  bool save_last = false;
  std::string filename;                // NeMo's pattern, e.g. megatron_llama--{step}-{consumed_samples}
  std::optional<std::string> dirpath;  // null: <log dir>/checkpoints
  // Write behind the next steps from a host copy of the state; unset: where the copy fits in memory
  // (jobs/job_plan.h async_save_fits), which train decides at its start and plan predicts.
  std::optional<bool> async_save;

  bool operator==(const CheckpointCallbackParams&) const = default;
};

struct ExpManagerConfig {
  std::optional<std::string> exp_dir;  // null: ./nemo_experiments
  std::string name;
  std::optional<std::string> explicit_log_dir;  // replaces exp_dir/name/version
  std::optional<std::string> version;
  bool resume_if_exists = false;
  bool resume_ignore_no_checkpoint = false;
  bool create_tensorboard_logger = false;
  bool create_checkpoint_callback = false;
  CheckpointCallbackParams checkpoint_callback_params;

  bool operator==(const ExpManagerConfig&) const = default;
};

struct TokenizerConfig {
  std::string library;               // sentencepiece | huggingface
  std::optional<std::string> type;   // huggingface: a folder holding tokenizer.model
  std::optional<std::string> model;  // sentencepiece: the tokenizer.model file

  bool operator==(const TokenizerConfig&) const = default;
};

// model.data.data_prefix: a list ([w1, p1, ...] or [p1, ...], entries as written) or, in NeMo's
// dictionary form, one list per split.
struct DataPrefix {
  bool per_split = false;
  std::vector<std::string> train;  // the list form, or the dictionary's train entry
  std::vector<std::string> validation, test;

  bool empty() const { return train.empty() && validation.empty() && test.empty(); }
  bool operator==(const DataPrefix&) const = default;
};

// One of model.data.{train_ds, validation_ds, test_ds} (NeMo's SFT keys; completion_map and pack are
// ours). sft_config() maps it onto data::SftConfig.
struct SftDatasetConfig {
  std::vector<std::string> file_names;
  bool shuffle = false;
  int64_t max_seq_length = 0;
  bool drop_last = false;
  std::vector<double> concat_sampling_probabilities;  // empty: files weighted equally
  std::string label_key;
  bool add_bos = false;
  bool add_eos = false;
  std::string prompt_template;    // NeMo form: ends with {<label_key>}
  std::string truncation_method;  // right | left
  std::map<std::string, std::string> completion_map;
  bool pack = false;

  // prompt_template without its trailing {label_key}, completion_key = label_key, truncation and
  // BOS/EOS as set; pad_id is the caller's (the tokenizer's).
  data::SftConfig sft_config(int32_t pad_id) const;
  bool operator==(const SftDatasetConfig&) const = default;
};

struct DataConfig {
  DataPrefix data_prefix;
  std::string splits_string;
  int64_t seq_length = 0;
  std::optional<std::string> index_mapping_dir;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
  bool validation_drop_last = false;
  bool fine_tuning = false;   // true: JSONL from train_ds/validation_ds/test_ds instead of data_prefix
  bool chat = false;          // fine-tuning rows are conversations / Alpaca records (data/chat.h)
  std::string chat_template;  // auto | llama2 | llama3 | chatml
  SftDatasetConfig train_ds, validation_ds, test_ds;

  bool operator==(const DataConfig&) const = default;
};

struct OptimConfig {
  std::string name;  // adamw (fused_adam is the same update)
  double lr = 0;
  double weight_decay = 0;
  std::vector<double> betas;  // [beta1, beta2]
  double eps = 0;
  // ours (Axolotl's embedding_lr): the peak learning rate of the embedding and the output layer,
  // scheduled as lr is (null: lr)
  std::optional<double> embedding_lr;
  SchedConfig sched;

  bool operator==(const OptimConfig&) const = default;
};

struct ModelConfig {
  int64_t micro_batch_size = 0;
  int64_t global_batch_size = 0;
  int tensor_model_parallel_size = 0;
  int pipeline_model_parallel_size = 0;
  // Megatron-core's uneven pipeline split: layers of the first / last stage (null: an even share);
  // the other stages split the rest evenly.
  std::optional<int> num_layers_in_first_pipeline_stage;
  std::optional<int> num_layers_in_last_pipeline_stage;
  bool sequence_parallel = false;
  bool distributed_optimizer = false;  // ZeRO-1 over data-parallel ranks
  bool overlap_grad_sync = false;      // all-reduce gradient buckets during the backward
  int64_t encoder_seq_length = 0;
  int64_t max_position_embeddings = 0;
  int num_layers = 0;
  int hidden_size = 0;
  int ffn_hidden_size = 0;
  int num_attention_heads = 0;
  std::optional<int> num_query_groups;  // GQA kv heads; null = num_attention_heads
  std::optional<int> kv_channels;       // head dim; null = hidden_size / num_attention_heads
  double init_method_std = 0;
  bool use_scaled_init_method = false;
  double layernorm_epsilon = 0;
  double rotary_base = 0;
  bool share_embeddings_and_output_weights = false;
  int make_vocab_size_divisible_by = 0;
  int64_t seed = 0;
  std::optional<std::string> activations_checkpoint_granularity;  // null | selective | full
  std::optional<std::string> activations_checkpoint_method;       // null | uniform | block
  std::optional<int64_t> activations_checkpoint_num_layers;
  std::optional<std::string> resume_from_checkpoint;
  std::optional<std::string> init_from;  // ours: a Hugging Face folder to start from
  // ours: the rows a tokenizer larger than init_from's vocabulary adds: subword_mean | mean | normal
  std::string new_token_init = "subword_mean";
  std::optional<std::string> output_dir;  // Hugging Face export folder (convert_to_hf)
  // ours: Hugging Face parameter-name patterns (fnmatch) of the tensors that do not train
  // (io::resolve_freeze resolves them against the model).
  std::vector<std::string> freeze = {};
  // ours: with a vocabulary grown from init_from, only the new rows of the embedding and output layer train
  bool freeze_base_vocab = false;
  TokenizerConfig tokenizer;
  DataConfig data;
  OptimConfig optim;

  int kv_heads() const { return num_query_groups ? *num_query_groups : num_attention_heads; }
  // The architecture for a vocabulary of vocab_size (the tokenizer's, or init_from's config.json),
  // padded by make_vocab_size_divisible_by (LlamaConfig::vocab_multiple).
  model::LlamaConfig llama_config(int vocab_size) const;
  // Layers of each pipeline stage (num_layers_in_first/last_pipeline_stage, the rest even:
  // model::pipeline_split); an Error in the terms of names when the keys allow none.
  std::vector<int> pipeline_layers(const FieldNames& names = FieldNames()) const;
  // Megatron's _vocab_size_with_padding: the rows the embedding and the lm head hold for a vocabulary
  // of vocab_size, the next multiple of make_vocab_size_divisible_by x TP (the extra rows are inert
  // padding; the model's vocab_size stays the real one).
  int64_t padded_vocab_size(int64_t vocab_size) const;
  // The SentencePiece model file: tokenizer.model, <tokenizer.type>/tokenizer.model or
  // <init_from>/tokenizer.model.
  std::string tokenizer_model_path() const;
  bool operator==(const ModelConfig&) const = default;
};

struct TrainConfig {
  std::string name;
  bool convert_to_hf = false;
  TrainerConfig trainer;
  ExpManagerConfig exp_manager;
  ModelConfig model;

  int64_t world_size() const { return int64_t(trainer.devices) * trainer.num_nodes; }
  int64_t data_parallel_size() const;           // world / (TP * PP)
  int64_t num_micro_batches() const;            // global_batch_size / (micro_batch_size * DP)
  LrSchedule lr_schedule() const;               // model.optim.sched resolved against trainer.max_steps
  data::GptDataConfig gpt_data_config() const;  // model.data for data::build_gpt_datasets (every split's prefixes)
  data::SampleOptions sample_options(int32_t eod_id) const;
  bool operator==(const TrainConfig&) const = default;
};

struct LoadedConfig {
  TrainConfig config;
  std::vector<std::string> notes;  // "ignored: ..." and similar, for the log; never printed here
};

// Loads `path`, applies overrides ("a.b=value", "+a.b=value"; values are YAML scalars or flow
// lists/maps), resolves interpolations and validates. Every failure is an Error naming the key,
// the value, what is allowed and where it came from (file:line or the override).
LoadedConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same for YAML text; source names it in messages.
LoadedConfig load_config_text(const std::string& yaml, const std::string& source,
                              const std::vector<std::string>& overrides = {});

// The resolved config as YAML (every key the trainer reads, no interpolations); load_config of it
// gives back an equal TrainConfig.
std::string to_yaml(const TrainConfig& config);

// One schema row, for help text, docs and tests.
struct KeyInfo {
  std::string path;           // dotted key
  std::string type;           // "integer", "number", "bool", "string", "list of numbers", ...
  std::string default_value;  // YAML text; "" for ignored keys
  std::string allowed;        // range or choices; "" when any value of the type is allowed
  std::string doc;
  enum class Status { used, ours, ignored, restricted, alias } status = Status::used;
};
const std::vector<KeyInfo>& config_keys();
// `train --help-config`: every key with type, default, allowed values and doc, by section.
std::string config_help();
// The key reference of docs/configuration.md (markdown tables), generated from the schema.
std::string config_reference_markdown();

}  // namespace llamatrain::train
