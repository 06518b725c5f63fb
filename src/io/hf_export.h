// A complete Hugging Face folder from a model: config.json, generation_config.json, the weights as
// safetensors sharded by size (with model.safetensors.index.json when there is more than one shard),
// and, given a SentencePiece model, tokenizer.model + tokenizer_config.json + special_tokens_map.json
// (LlamaTokenizer). The folder is written under a temporary name (core/file.h AtomicDir), reloaded
// from there and checked, and only then renamed into place (replacing a previous export): every tensor must equal the model's weights
// rounded to the export dtype, and the logits of a few tokens must agree with the model's own.
#pragma once

#include <cstdint>
#include <string>

#include "io/safetensors.h"
#include "model/llama.h"

namespace llamatrain::io {

struct ExportOptions {
  std::string torch_dtype = "bfloat16";      // "bfloat16" | "float32"
  std::string tokenizer_model;               // "" = no tokenizer files
  int64_t max_shard_bytes = 5'000'000'000;   // transformers' default max_shard_size (5GB)
  BytesDone progress;                        // optional: bytes of each tensor written
};

struct ExportReport {
  std::string dir;
  int64_t bytes = 0;              // weights written
  int num_shards = 0;
  double max_abs_logit_diff = 0;  // reloaded model against the source, on the check tokens
  double tolerance = 0;           // what that difference was held to
};

// Fails early (before any work) when out_dir is a file, a folder holding files an export would not
// write, or not writable; callers that export after a long run call this at the start.
void check_export_target(const std::string& out_dir);

// Writes and verifies the folder; throws Error (and leaves no partial folder) on any failure.
ExportReport export_hf(model::LlamaModel& model, const std::string& out_dir, const ExportOptions& options);

// "bf16" | "bfloat16" | "fp32" | "float32" -> HF torch_dtype; throws Error otherwise.
std::string parse_export_dtype(const std::string& name);

}  // namespace llamatrain::io
