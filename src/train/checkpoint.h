// Training checkpoints: one directory per save, committed by rename, so a crash at any point leaves
// either the old set of checkpoints or the old set plus one complete new one. Layout of
// CHECKPOINTS_DIR/step_<N>/:
//   config.json, model.safetensors (or shards + index)  a Hugging Face checkpoint of the whole model's
//                                                       weights (fp32; bf16 in bf16-sr, where bf16 is
//                                                       the master), the same bytes under any layout
//   optimizer.safetensors   AdamW moments exp_avg.<param>, exp_avg_sq.<param>; under model parallelism
//                           or ZeRO-1, one file per rank holding moments no other rank holds:
//                           optimizer-RRRRR-of-NNNNN.safetensors (world rank R of N). Each tensor is
//                           the flat element range range.<param> = [first, count] of the writer's local
//                           tensor, which sits in the full tensor as shard.<param> (TensorShard JSON;
//                           absent in older checkpoints: the whole tensor)
//   tokenizer.model         copy of the run's tokenizer, when it has one
//   train_config.yaml       the resolved configuration of the run
//   trainer_state.json      written last: step, consumed samples, counters, the layout that wrote it,
//                           and for every file its size and CRC32C per 64 MiB block (verified before a
//                           resume uses it)
// Because the model part is an HF folder, `generate`, `eval` and `export` read a checkpoint as is; and
// because every tensor says where it sits in the full model, any layout loads any checkpoint.
// The weights and moments come from LlamaModel::state_tensors(), so a mismatch is named by tensor.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/file.h"
#include "io/safetensors.h"

#include "model/llama.h"
#include "parallel/layout.h"

namespace llamatrain::train {

// What a checkpoint restores besides the tensors. Data order is a pure function of (seed, global
// sample index), so consumed_samples is the whole data position.
// How the steps were batched when a checkpoint was written (trainer_state.json's "layout"): the
// rank layout and the batch; 0 where the checkpoint does not record it (an older one).
struct BatchLayout {
  int tensor_parallel = 0;
  int pipeline_parallel = 0;
  int data_parallel = 0;
  int64_t global_batch_size = 0;
  int64_t micro_batch_size = 0;
  // Micro-batches per data-parallel rank per step (0 when not recorded).
  int64_t accumulation() const {
    return micro_batch_size > 0 && data_parallel > 0 ? global_batch_size / (micro_batch_size * data_parallel) : 0;
  }
};

struct TrainerState {
  int64_t step = 0;              // training steps done (skipped ones included: the schedule's clock)
  int64_t optimizer_steps = 0;   // AdamW updates applied (its bias-correction count)
  int64_t consumed_samples = 0;  // global samples read (skipped windows included)
  uint64_t seed = 0;
  std::string precision;      // model::precision_name
  double lr = 0;              // learning rate of the last step
  double loss = 0;            // loss of the last step
  int64_t skipped_steps = 0;  // steps skipped for a non-finite loss or gradient norm
  int64_t rollbacks = 0;      // rollbacks to an earlier checkpoint after repeated skips
  double train_seconds = 0;   // wall time spent training before this checkpoint
  // The model tensors that were frozen (model::LlamaConfig::frozen; they have no moments in the
  // checkpoint). Saved from the model's config, not from here.
  std::vector<std::string> frozen;
  // The batch of the run (global and micro batch size; the trainer sets them): saved with the
  // rank layout, read back with it.
  BatchLayout layout;
};

struct CheckpointInfo {
  std::string path;  // CHECKPOINTS_DIR/step_<N>
  int64_t step = 0;
};

// The ranks of a job that save one checkpoint together (default: a single process).
struct SaveGroups {
  parallel::Communicator* world = nullptr;  // every rank of the job (null: one process)
  parallel::Communicator* mp = nullptr;     // this rank's model replica (ParallelGroups::mp); needed when TP x PP > 1
  parallel::ParallelLayout layout;          // this rank's place; its TP and PP are the model's ShardPlan's
};

// Saves model + state as CHECKPOINTS_DIR/step_<state.step> (replacing an older save of the same step
// only after the new one is complete). The tokenizer files of tokenizer_model ("" for none; a
// tokenizer.model, a tokenizer.json or a folder: io::tokenizer_source_files) are copied in; config_yaml is
// written as train_config.yaml. Returns the checkpoint's path. Throws Error (disk full, permissions)
// after removing the partial directory; existing checkpoints are never touched.
// Collective over groups.world: the data-parallel replica dp 0 gathers its weights onto world rank 0
// (gather_weights.h), which writes them and commits the folder; every rank holding moments no other
// rank holds (ZeRO-1 shards, dp rank 0 otherwise; replicated tensors from tp rank 0 and the first
// stage only) writes its optimizer file into rank 0's temporary folder. The others wait for rank 0 in
// barriers on groups.world, the senders of the gather on groups.mp: callers hold LongWaits on both.
// progress (optional) gets the bytes of each tensor written: checkpoint_tensor_bytes(model, rank 0).
std::string save_checkpoint(const std::string& checkpoints_dir, model::LlamaModel& model, const TrainerState& state,
                            const std::string& tokenizer_model, const std::string& config_yaml,
                            const io::BytesDone& progress, const SaveGroups& groups);
// A save in three parts, so that the writing may run behind the next training steps
// (exp_manager.checkpoint_callback_params.async_save); save_checkpoint is the three in a row.
//  1. The constructor, collective as save_checkpoint: the temporary folder, the weights gathered under
//     model parallelism, and with `copy` the weights (on the rank that writes them) and this rank's
//     moments copied to host memory (copy_bytes()), after which the model may train on. `reuse`, an
//     earlier save of the same model, lends its copies' memory (touched already: a shorter pause).
//  2. write(): this rank's files and their records, without communication (another thread may run
//     it). A failure is kept for commit(); done() is then true.
//  3. commit(), collective: rank 0 writes the tokenizer, the config and trainer_state.json with every
//     rank's file records, and renames the folder into place; a failure on any rank throws on every
//     rank and leaves the older checkpoints as they were.
class CheckpointSave {
 public:
  CheckpointSave(const std::string& checkpoints_dir, model::LlamaModel& model, const TrainerState& state,
                 std::string tokenizer_model, std::string config_yaml, const SaveGroups& groups, bool copy,
                 CheckpointSave* reuse = nullptr);
  ~CheckpointSave();
  CheckpointSave(const CheckpointSave&) = delete;
  CheckpointSave& operator=(const CheckpointSave&) = delete;

  void write(const io::BytesDone& progress = {});
  bool done() const { return done_.load(); }
  std::string commit();  // the checkpoint's path

  int64_t copy_bytes() const { return copy_bytes_; }  // host memory the copies take on this rank
  int64_t step() const { return state_.step; }
  const std::string& path() const { return final_path_; }

 private:
  struct Moment {
    model::StateTensor state;  // data: the model's memory, or `copy`
    bool in_norm = true;       // ParamSpec::in_norm and owned: which elements this rank writes
    model::TensorShard owned;
    std::vector<std::byte> copy;  // the stored elements, copied
  };
  std::string write_moments(const io::BytesDone& progress);  // the optimizer file's name

  model::LlamaModel& model_;
  TrainerState state_;
  std::string tokenizer_model_, config_yaml_;
  SaveGroups groups_;
  int rank_ = 0, ranks_ = 1;
  bool zero1_ = false;
  std::string final_path_, tmp_;
  std::optional<AtomicDir> out_;                // rank 0: the folder, renamed into place by commit()
  std::unique_ptr<model::LlamaModel> weights_;  // the weights to write: gathered, copied, or null (the model's)
  bool writes_weights_ = false, writes_moments_ = false, moments_on_host_ = true;
  std::vector<Moment> moments_;
  int64_t copy_bytes_ = 0;
  nlohmann::json records_;  // this rank's files: size and CRC32C blocks
  std::exception_ptr error_;
  std::atomic<bool> done_{false};
};

// Data parallelism only (every rank a whole replica): dp is the world (null: one process).
std::string save_checkpoint(const std::string& checkpoints_dir, model::LlamaModel& model, const TrainerState& state,
                            const std::string& tokenizer_model, const std::string& config_yaml,
                            const io::BytesDone& progress = {}, parallel::Communicator* dp = nullptr);
// Bytes of the tensors this rank moves, the total its progress callback reaches, for progress bars:
// load_checkpoint reads its weights and moments; a save writes its moments, plus all the model's
// weights on world rank 0 (full_weights).
int64_t checkpoint_tensor_bytes(const model::LlamaModel& model, bool full_weights = false);

// Bytes a whole checkpoint of the model takes on disk (weights and AdamW moments, all ranks' files).
int64_t checkpoint_disk_bytes(const model::LlamaConfig& c, model::Precision p);

// Throws Error naming the first model setting (hidden size, layers, heads, vocabulary, tying) in which
// the checkpoint at path differs from c; the check load_checkpoint makes before reading anything.
void check_checkpoint_compatible(const std::string& path, const model::LlamaConfig& c);

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

// The error of a resume that found checkpoints in checkpoints_dir but none intact (damaged: what
// verify_checkpoint said of each, newest first): starting again from step 0 would silently throw the
// run away, so this is an error whatever resume_ignore_no_checkpoint says.
std::string all_checkpoints_damaged(const std::string& checkpoints_dir, const std::vector<std::string>& damaged);

// Reads trainer_state.json (throws Error naming the file and field).
TrainerState read_trainer_state(const std::string& path);

// Restores weights and AdamW moments into model (same config, else an Error naming the difference)
// and returns the trainer state. The model may be any rank's part of any layout, with or without a
// ZeRO-1 shard, whatever layout wrote the checkpoint: each rank reads its part of the weights and,
// for every moment tensor it holds, the overlapping parts of every optimizer file's tensors of that
// name; every element must be found exactly once (else an Error naming tensor and checkpoint). Not
// collective: each rank reads on its own.
// progress (optional) gets the bytes of each tensor read: checkpoint_tensor_bytes(model) in all.
TrainerState load_checkpoint(const std::string& path, model::LlamaModel& model, const io::BytesDone& progress = {});

// Deletes the oldest complete checkpoints so that at most keep remain (keep <= 0: keep all), and
// leftovers of interrupted saves. Returns the paths removed.
std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int keep);

}  // namespace llamatrain::train
