// The training loop of `llamatrain train CONFIG`: layout-agnostic (the data position is a global
// sample index and the model sees micro-batches), so data, tensor and pipeline parallelism wrap around
// it rather than into it. In order: the plan (train/run_plan.h: layout, model, shapes, memory, checked
// before anything is written), the run directory and resolved config, the model (from
// model.init_from, a checkpoint, or random init), data, then steps of gradient accumulation over
// micro-batches, a non-finite guard (skip; after K in a row roll back to the last checkpoint and skip
// that data window), AdamW with the LR schedule, the record (console, TensorBoard, metrics.jsonl:
// train/run_log.h), validation, checkpoints (every N steps or seconds, at the end, on SIGTERM/SIGINT:
// train/signals.h), and a Hugging Face export at the end (convert_to_hf).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/piece_lengths.h"
#include "config/config.h"
#include "train/events.h"
#include "train/faults.h"
#include "train/run_plan.h"

namespace llamatrain::parallel {
class Communicator;
}

namespace llamatrain::train {

struct TrainResult {
  std::string log_dir;
  int64_t steps = 0;  // optimizer steps done when the run ended
  double last_loss = 0;
  double last_val_loss = 0;     // NaN when no validation ran
  std::string last_checkpoint;  // "" when none was saved
  std::string hf_export;        // "" when convert_to_hf is off
  int stop_signal = 0;          // SIGTERM / SIGINT that stopped the run after its checkpoint; 0 if none
};

// Runs the training described by config (notes: the loader's "ignored: ..." lines, printed at start).
// world: the job's ranks (mpirun / srun), split into data-, tensor- and pipeline-parallel groups as
// the config's model.*_parallel_size say; nullptr or one rank: a single process. Every rank calls it;
// rank 0 prints, logs, writes the run folder and exports.
// A failure (Error, std::bad_alloc, a filesystem error, any std::exception) prints its error event
// (train/events.h) on the failing rank before it propagates. faults: a test's (train/faults.h).
TrainResult run_training(const TrainConfig& config, const std::vector<std::string>& notes = {},
                         parallel::Communicator* world = nullptr, const RunCommand& command = {},
                         const InjectedFaults& faults = {});

// What evaluate_loss measured on a split. Bits per byte (per character) is the loss summed over the
// scored targets, in bits, over those targets' UTF-8 bytes (characters) as data/piece_lengths.h
// counts them: sum(loss) / ln 2 / bytes. Control targets (</s>) add their loss but no bytes.
struct EvalLoss {
  double loss = NAN;             // loss_sum / tokens: the mean over every scored target (Megatron's)
  double loss_sum = 0;           // nats summed over every scored target (targets -100 left out)
  int64_t tokens = 0;            // scored targets
  int64_t bytes = 0, chars = 0;  // their text; 0 when evaluated without piece lengths
  // A split that blends sources (TrainData::sources): the same figures of each source's sequences of
  // the same batches, in the blend's order, each named; they sum to the whole.
  std::string name;
  std::vector<EvalLoss> sources;
  double bits_per_byte() const { return bytes > 0 ? loss_sum / std::log(2.0) / double(bytes) : NAN; }
  double bits_per_char() const { return chars > 0 ? loss_sum / std::log(2.0) / double(chars) : NAN; }
};

// The loss over the first `batches` global batches of a split (forward only), as validation
// computes it. With dp (data-parallel ranks), each rank evaluates its share of every global batch,
// and the result (the same on every rank) covers all of them: the mean loss averaged, the sums
// summed. With pp (the stages of a pipeline), the micro-batches run forward down the pipeline and
// the last stage, which has the losses, counts the targets. lengths (null: no bytes or characters
// counted) is the tokenizer's table of piece lengths. A blended split also gets each source's figures.
class TrainData;
EvalLoss evaluate_loss(model::LlamaModel& model, const TrainData& data, data::Split split, int64_t batches,
                       int64_t global_batch_size, int micro_batch_size, parallel::Communicator* dp = nullptr,
                       parallel::Communicator* pp = nullptr, const data::PieceLengths* lengths = nullptr);

}  // namespace llamatrain::train
