// Hugging Face Llama, Qwen2 and Mistral checkpoints <-> LlamaModel. The HF tensor names live here and
// in hf_config.cpp only. Every HF tensor is a contiguous row block of one model arena tensor (q/k/v_proj
// inside wqkv, their biases inside bqkv, gate/up inside w13), so loading is a copy (with dtype
// conversion) into place and saving points straight at the arena (fp32) or at a bf16 copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/llama.h"

namespace llamatrain::io {

// One HF tensor as a slice of a full model parameter tensor: rows [row_begin, row_begin+rows) of
// layer `layer` (-1 for unstacked tensors) of the tensor `param`, each row `cols` wide; that is the
// contiguous elements [element, element + rows*cols) of the full tensor, flattened.
struct HfTensorSlice {
  std::string hf_name;  // "model.layers.3.self_attn.k_proj.weight"
  std::string param;    // "wqkv"
  int layer = -1;
  int64_t row_begin = 0, rows = 0, cols = 0;
  int64_t element = 0;         // first element in the full parameter tensor
  int64_t offset = -1;         // element offset in a whole model's parameter arena (-1 from a config)
  std::vector<int64_t> shape;  // HF shape: {rows, cols}, or {cols} for norm weights
};

// All HF tensors of the full model, in HF's usual order (embedding, layer by layer, norm, lm_head).
// From a config (offset -1: a model-parallel rank holds parts, placed by its ParamSpec::shard), or
// from a whole (unsharded) model, with arena offsets.
std::vector<HfTensorSlice> hf_tensor_slices(const model::LlamaConfig& config);
std::vector<HfTensorSlice> hf_tensor_slices(const model::LlamaModel& model);

// What model.freeze's patterns freeze: whole model tensors (LlamaConfig::frozen, in arena order: no
// gradient, no moments) and parts of others (LlamaConfig::frozen_parts: some layers of a stacked
// tensor, q_proj of one layer, a vocabulary's first rows). A pattern is an fnmatch glob over the full
// model's HF tensor names, `*` matching any characters, dots included ("model.layers.*" is every layer
// tensor, "model.layers.0.*" the first layer's), optionally followed by a row range "[begin:end]" of
// each tensor it names (elements for a 1-D one; either end may be left out: "[:32000]"). A model
// tensor whose HF tensors the patterns cover whole is frozen whole. Errors (naming `key`): a pattern
// that matches no tensor (listing the names), a malformed or empty row range, or one past a tensor's
// rows, and every tensor frozen. With vocab_size <= 0 (not known yet), vocabulary rows are not checked.
struct FreezeSet {
  std::vector<std::string> tensors;
  std::vector<model::FrozenPart> parts;
};
FreezeSet resolve_freeze(const model::LlamaConfig& config, const std::vector<std::string>& patterns,
                         const std::string& key = "model.freeze");
// A model tensor's HF names with the layer as '*' ("model.layers.*.mlp.down_proj.weight"), for messages.
std::string hf_names_of(const model::LlamaConfig& config, const std::string& tensor);

// Loads weights from DIR (model.safetensors or an index + shards) into the model's fp32 arena and
// calls params_changed(). A model-parallel rank's model (model/shard.h) copies only its part of each
// HF tensor (reading those pages of the mmap) and skips the tensors its pipeline stage does not hold;
// the tied embedding goes to every stage holding wte. Missing tensors, wrong shapes or dtypes throw
// Error naming file and tensor (whether or not this rank holds them); tensors we don't use
// (rotary_emb.inv_freq) are ignored; any other tensor the config's architecture lacks is an Error
// naming it, its file and what is supported (checked before anything is read: a fused W_pack, o_proj
// or MLP biases, q/k/v biases without qkv_bias). A tied model's lm_head.weight is accepted only as an
// exact copy of model.embed_tokens.weight. q/k/v biases (qkv_bias) are rows of "bqkv", one column each.
// progress (optional) gets the bytes read of each tensor: model.num_params() elements of the files'
// dtype in all. With growth (io/vocab_resize.h) the checkpoint has growth->base_rows vocabulary rows and
// the model growth->rows: the base rows are copied and the new ones made by fill_new_rows. A folder of
// pytorch_model.bin files (or their index) instead of safetensors loads the same way (SafetensorsCheckpoint).
struct VocabGrowth;
// load_hf_weights' checks that need no tensor's data, from the headers alone (what `plan` checks): the
// same Errors for a missing tensor, a wrong shape or dtype, or a tensor the architecture lacks. Returns
// the checkpoint's tensor count.
size_t check_hf_weights(const std::string& dir, const model::LlamaConfig& config, const VocabGrowth* growth = nullptr);
void load_hf_weights(model::LlamaModel& model, const std::string& dir, const BytesDone& progress = {},
                     const VocabGrowth* growth = nullptr);

// config.json + weights of an HF folder -> a new model in the given precision.
std::unique_ptr<model::LlamaModel> load_hf_model(const std::string& dir, model::Precision precision,
                                                 model::Device device = model::Device::cpu);

// A file written next to the weights (tokenizer.model).
struct HfExtraFile {
  std::string name;
  std::string bytes;
};

// Names (fnmatch patterns) of the files an export writes; an existing folder holding only these is
// a previous export and may be replaced.
const std::vector<std::string>& hf_export_files();

// Writes config.json and the weights (torch_dtype "float32" or "bfloat16", sharded at max_shard_bytes)
// into the existing folder DIR, without committing it: for writers that add files of their own and
// commit the folder themselves (checkpoints, exports). A whole model only (a model-parallel job
// gathers its weights first: train/gather_weights.h).
void write_hf_weights(const model::LlamaModel& model, const std::string& dir, const std::string& torch_dtype,
                      int64_t max_shard_bytes = 5'000'000'000, const BytesDone& progress = {});

// Writes config.json, the weights (torch_dtype "float32" or "bfloat16", sharded at max_shard_bytes,
// default 5 GB, HF's rule) and extra_files as the folder DIR, atomically: everything goes to
// DIR.tmp-XXXXXX, renamed to DIR at the end. An existing DIR is replaced only if it is empty or a
// previous export (hf_export_files); otherwise Error before anything is written.
void save_hf_checkpoint(const model::LlamaModel& model, const std::string& dir, const std::string& torch_dtype,
                        int64_t max_shard_bytes = 5'000'000'000, const std::vector<HfExtraFile>& extra_files = {});

}  // namespace llamatrain::io
