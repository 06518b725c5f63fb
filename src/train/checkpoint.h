// Training checkpoints: one directory per save, committed by rename, so a crash at any point leaves
// either the old set of checkpoints or the old set plus one complete new one. Layout of
// CHECKPOINTS_DIR/step_<N>/:
//   config.json, model.safetensors (or shards + index)  a Hugging Face checkpoint of the weights (fp32;
//                                                       bf16 in bf16-sr, where bf16 is the master)
//   optimizer.safetensors   AdamW moments exp_avg.<param>, exp_avg_sq.<param> (global shapes)
//   tokenizer.model         copy of the run's tokenizer, when it has one
//   train_config.yaml       the resolved configuration of the run
//   trainer_state.json      written last: step, consumed samples, counters, and for every file its
//                           size and CRC32C per 64 MiB block (verified before a resume uses it)
// Because the model part is an HF folder, `generate`, `eval` and `export` read a checkpoint as is.
// The weights and moments come from LlamaModel::state_tensors(), so a mismatch is named by tensor.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/llama.h"

namespace llamatrain::train {

// What a checkpoint restores besides the tensors. Data order is a pure function of (seed, global
// sample index), so consumed_samples is the whole data position.
struct TrainerState {
  int64_t step = 0;              // training steps done (skipped ones included: the schedule's clock)
  int64_t optimizer_steps = 0;   // AdamW updates applied (its bias-correction count)
  int64_t consumed_samples = 0;  // global samples read (skipped windows included)
  uint64_t seed = 0;
  std::string precision;         // model::precision_name
  double lr = 0;                 // learning rate of the last step
  double loss = 0;               // loss of the last step
  int64_t skipped_steps = 0;     // steps skipped for a non-finite loss or gradient norm
  int64_t rollbacks = 0;         // rollbacks to an earlier checkpoint after repeated skips
  double train_seconds = 0;      // wall time spent training before this checkpoint
};

struct CheckpointInfo {
  std::string path;  // CHECKPOINTS_DIR/step_<N>
  int64_t step = 0;
};

// Saves model + state as CHECKPOINTS_DIR/step_<state.step> (replacing an older save of the same step
// only after the new one is complete). tokenizer_model ("" for none) is copied in; config_yaml is
// written as train_config.yaml. Returns the checkpoint's path. Throws Error (disk full, permissions)
// after removing the partial directory; existing checkpoints are never touched.
// progress (optional) gets the bytes of each tensor written: checkpoint_tensor_bytes() in all.
std::string save_checkpoint(const std::string& checkpoints_dir, model::LlamaModel& model,
                            const TrainerState& state, const std::string& tokenizer_model,
                            const std::string& config_yaml, const io::BytesDone& progress = {});
// Bytes of the tensors a checkpoint of this model holds (weights and moments), for progress bars.
int64_t checkpoint_tensor_bytes(const model::LlamaModel& model);

// Complete checkpoints (a trainer_state.json present) in CHECKPOINTS_DIR, oldest first. Temporary
// directories of interrupted saves are not listed.
std::vector<CheckpointInfo> list_checkpoints(const std::string& checkpoints_dir);

// Checks every file of a checkpoint against its recorded size and CRC32C; returns "" when intact,
// otherwise what is wrong, naming the file.
// progress (optional) gets the bytes of each block checked.
std::string verify_checkpoint(const std::string& path, const io::BytesDone& progress = {});
// Total bytes verify_checkpoint reads (the sizes trainer_state.json records; 0 if unreadable).
int64_t checkpoint_file_bytes(const std::string& path);

// The newest checkpoint that verifies; each newer one that does not adds a warning naming the
// problem. nullopt when there is none.
std::optional<CheckpointInfo> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                      std::vector<std::string>* warnings);

// Reads trainer_state.json (throws Error naming the file and field).
TrainerState read_trainer_state(const std::string& path);

// Restores weights and AdamW moments into model (same config and precision, else an Error naming
// the difference) and returns the trainer state.
// progress (optional) gets the bytes of each tensor read: checkpoint_tensor_bytes() in all.
TrainerState load_checkpoint(const std::string& path, model::LlamaModel& model, const io::BytesDone& progress = {});

// Deletes the oldest complete checkpoints so that at most keep remain (keep <= 0: keep all), and
// leftovers of interrupted saves. Returns the paths removed.
std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int keep);

}  // namespace llamatrain::train
