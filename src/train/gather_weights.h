// Gathering one model replica's weights (its TP x PP ranks, the ParallelGroups::mp communicator) onto
// one rank, to write them as a whole-model Hugging Face folder whose bytes do not depend on the
// layout. Tensor by tensor: the other ranks send straight from their parameter arenas (no extra memory
// there) and mp rank 0 copies each part into place through the part's TensorShard. The ranks send
// their shard tables first, so no rank needs another's plan. Replicated copies (norm weights on TP
// ranks > 0, the tied embedding on the last stage) are not sent: ParamSpec::in_norm marks the one
// copy of every element that counts.
#pragma once

#include <memory>

#include "model/llama.h"

namespace llamatrain::parallel {
class Communicator;
}

namespace llamatrain::train {

// Collective over mp (mp rank 0: tp 0 of the first stage). Returns on mp rank 0 a weights-only whole
// model (fp32 precision, the local model's full config) holding every weight bitwise as the ranks
// hold them, nullptr on the other ranks. Peak extra memory: the whole model and one received local
// tensor on mp rank 0, nothing elsewhere.
std::unique_ptr<model::LlamaModel> gather_full_weights(model::LlamaModel& local, parallel::Communicator& mp);

}  // namespace llamatrain::train
