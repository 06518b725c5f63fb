// The run's record: every logged step as one StepRecord, which makes the console line, a line of
// metrics.jsonl and TensorBoard scalars (metrics() lists each value once with its jsonl key and its
// TensorBoard tag, NeMo's where it has one: adding a metric is a field and one line there); and the
// validation results (with bits per byte and per character) and rollback events. metrics.jsonl and the event files are rank 0's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "obs/metrics.h"
#include "obs/tensorboard.h"
#include "train/console.h"

namespace llamatrain::train {

struct StepRecord {
  int64_t step = 0, max_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double embedding_lr = -1;  // model.optim.embedding_lr's rate this step; < 0: not set (lr)
  int64_t consumed_samples = 0;
  double step_s = 0;  // mean over the steps since the last record
  double seq_per_s = 0, tokens_per_s = 0, mfu = 0;
  double comm_s = 0;          // per step, blocked in communication (any group)
  double peak_rss = 0;        // bytes
  double device_memory = -1;  // bytes in use on the run's GPU (cudaMemGetInfo: every process's); < 0 on a CPU
  double eta_s = 0;

  struct Metric {
    const char* key;  // metrics.jsonl
    const char* tag;  // TensorBoard (nullptr: not there)
    double value;
    bool integer = false;
  };
  std::vector<Metric> metrics(bool multi_rank) const;
};

// One validation: the loss (the mean over every scored target, as Megatron's) and, when the run has a
// tokenizer, bits per byte and per character over the scored targets (train/trainer.h: EvalLoss).
struct ValidationRecord {
  int64_t step = 0, batches = 0;
  double loss = 0, seconds = 0;
  bool has_text = false;  // bits per byte / per character and the counts below are set
  double bits_per_byte = 0, bits_per_char = 0;
  int64_t tokens = 0, bytes = 0, chars = 0;
  // A blended split: each source's figures over its sequences of the same batches (name set, sources
  // empty). metrics.jsonl, the event and TensorBoard get them as "val_loss/NAME", ...
  std::string name;
  std::vector<ValidationRecord> sources;
};

class RunLog {
 public:
  // active: this rank writes the files (rank 0); tensorboard: exp_manager.create_tensorboard_logger.
  RunLog(const Console& console, const std::string& log_dir, bool active, bool tensorboard, bool multi_rank);

  void step(const StepRecord& r);
  void validation(const ValidationRecord& v);
  // A rollback at `step` to the checkpoint of `to_step`, skipping samples [begin, end).
  void rollback(int64_t step, int64_t to_step, int64_t skipped_begin, int64_t skipped_end);

 private:
  const Console& console_;
  bool multi_rank_;
  std::optional<obs::MetricsWriter> metrics_;
  std::unique_ptr<obs::TensorBoardWriter> tb_;
};

}  // namespace llamatrain::train
