// The next token of a generation from the last position's logits: the argmax at temperature 0, else
// nucleus (top-p) sampling: softmax(logits / temperature) over the smallest set of the most likely
// tokens whose probability reaches top_p, drawn with a uniform number u in [0, 1) (the caller's
// counter-based RNG, so a seed reproduces a sample exactly). generate_tokens runs the whole loop over
// a model's KV cache; turning ids into text is the caller's (the model knows no tokenizer).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace llamatrain::model {

class LlamaModel;

int sample_token(const std::vector<float>& logits, float temperature, float top_p, float u);

struct GenerationOptions {
  int max_new_tokens = 64;
  float temperature = 0.8f;  // 0: greedy
  float top_p = 0.9f;
  uint64_t seed = 42;     // step s draws random_uniform(seed, s, 0, 0)
  int pieces = 0;         // > 0: ids from here on (a vocab padded past the tokenizer's pieces) are never sampled
  std::vector<int> stop;  // ids that end the generation (eos, a chat template's end of turn)
};

// Decodes prompt into the model's KV cache (reset to prompt + max_new_tokens positions), then samples
// up to max_new_tokens ids, calling on_token(id) for each one that is not a stop id. Returns every id
// sampled, the stop id that ended it included.
std::vector<int> generate_tokens(LlamaModel& m, const std::vector<int>& prompt, const GenerationOptions& o,
                                 const std::function<void(int)>& on_token);

}  // namespace llamatrain::model
