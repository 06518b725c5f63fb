// The next token of a generation from the last position's logits: the argmax at temperature 0, else
// nucleus (top-p) sampling: softmax(logits / temperature) over the smallest set of the most likely
// tokens whose probability reaches top_p, drawn with a uniform number u in [0, 1) (the caller's
// counter-based RNG, so a seed reproduces a sample exactly).
#pragma once

#include <vector>

namespace llamatrain::model {

int sample_token(const std::vector<float>& logits, float temperature, float top_p, float u);

}  // namespace llamatrain::model
