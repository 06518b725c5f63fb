// A complete Hugging Face folder from a model: config.json (the model's family), generation_config.json
// (eos_token_id a list when the model stops on several ids, no bos_token_id when it has none), the
// weights as safetensors sharded by size (with model.safetensors.index.json when there is more than one
// shard), and the tokenizer files: a tokenizer.json and its tokenizer_config.json copied byte for byte,
// or a SentencePiece tokenizer.model with LlamaTokenizer's tokenizer_config.json + special_tokens_map.json.
// The folder is written under a temporary name (core/file.h AtomicDir), reloaded from there and
// checked, and only then renamed into place (replacing a previous export): every tensor must equal the
// model's weights rounded to the export dtype, and the logits of a few tokens must agree with the model's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/llama.h"

namespace llamatrain::io {

struct ExportOptions {
  std::string torch_dtype = "bfloat16";  // "bfloat16" | "float32"
  // "" = no tokenizer files; else a tokenizer.model, a tokenizer.json, or a folder holding them
  // (tokenizer_source_files).
  std::string tokenizer_model;
  int64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size (5GB)
  // "" or the Hugging Face folder the model started from (model.init_from): its generation_config.json,
  // the family's own release settings (Qwen2.5-Instruct's two end-of-turn ids, sampling defaults), is
  // kept as it is when its token ids fit the model; otherwise one is written from the model's config.
  std::string source_dir;
  BytesDone progress;  // optional: bytes of each tensor written
};

struct ExportReport {
  std::string dir;
  int64_t bytes = 0;  // weights written
  int num_shards = 0;
  double max_abs_logit_diff = 0;  // reloaded model against the source, on the check tokens
  double tolerance = 0;           // what that difference was held to
  std::string generation_config;  // where generation_config.json came from, for the log
};

// Fails early (before any work) when out_dir is a file, a folder holding files an export would not
// write, or not writable; callers that export after a long run call this at the start.
void check_export_target(const std::string& out_dir);

// Writes and verifies the folder; throws Error (and leaves no partial folder) on any failure.
ExportReport export_hf(model::LlamaModel& model, const std::string& out_dir, const ExportOptions& options);

// The tokenizer files a source stands for, with their bytes: a file named tokenizer.json (or a folder)
// gives every one of tokenizer.json, tokenizer.model, tokenizer_config.json and special_tokens_map.json
// its folder holds; any other file is a SentencePiece model, copied alone as tokenizer.model. Error
// when the source does not exist or a folder holds neither tokenizer.json nor tokenizer.model.
std::vector<HfExtraFile> tokenizer_source_files(const std::string& source);

// What an export needs of a tokenizer.json: its size (the largest id of model.vocab and added_tokens,
// plus one) and the added tokens' text by id (for tokenizer_config.json's bos/eos_token). Error naming
// `name` when the text is not a tokenizer.json.
struct TokenizerJsonVocab {
  int size = 0;
  std::map<int, std::string> added;
};
TokenizerJsonVocab tokenizer_json_vocab(const std::string& text, const std::string& name);

// "bf16" | "bfloat16" | "fp32" | "float32" -> HF torch_dtype; throws Error otherwise.
std::string parse_export_dtype(const std::string& name);

}  // namespace llamatrain::io
