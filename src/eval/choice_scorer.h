// Scores multiple-choice questions as lm-evaluation-harness scores its multiple_choice tasks: the
// log-likelihood of each choice's continuation (" A" .. " D") after the question's context, predicted
// = the argmax. Tokenization is the harness's: the context and context + continuation are encoded
// (BOS first when the tokenizer has one), the continuation's tokens are what the second encoding
// holds past the first's length, and only they are scored. When the four continuations are one token
// each after the same context tokens (Llama 2's "▁A" .. "▁D"), one forward pass of the context gives
// all four (the last position's log-softmax); otherwise each choice is its own sequence.
// Fitting the context: while a sequence is longer than `seq` tokens, the last few-shot example is
// dropped (hendrycks/test's rule: the first k dev rows, k lowered by one); with no example left, the
// tokens are cut from the front as the harness cuts them. Sequences are batched by length (longest
// first), padded at the end, and only the scored positions' logits are computed (n x V floats).
// Several processes (mpirun): the questions are dealt out in turn (question i to rank i mod N), each
// rank scores its own, and a sum over the ranks gives every rank every question's figures.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/benchmark.h"

namespace llamatrain::data {
class Tokenizer;
}
namespace llamatrain::model {
class LlamaModel;
}

namespace llamatrain::eval {

struct ScoreOptions {
  int shots = 5;              // dev examples before each question (fewer when the subject has fewer, or to fit)
  int seq = 0;                // the most tokens one forward pass sees (the model's context, or --seq-length)
  int batch = 4;              // sequences per forward pass
  bool keep_prompts = false;  // ScoredQuestion::context filled (--dump)
  // Sharing the questions among ranks: this rank, the number of ranks, and an in-place sum of n
  // doubles over every rank (an all-reduce; unset with one rank). The progress bar is rank 0's.
  int rank = 0, ranks = 1;
  std::function<void(double* values, size_t n)> sum_over_ranks;
};

// One sequence to run: its tokens, and the (position, token, choice) log-probabilities to read.
struct ScoredToken {
  int position;  // in tokens: the logits there predict `token`
  int token;
  int choice;
};
struct ChoiceSequence {
  int question;  // index into the prepared questions
  std::vector<int32_t> tokens;
  std::vector<ScoredToken> scored;
};

// A question's context fitted and tokenized: its sequences (one, or one per choice).
struct PreparedQuestion {
  int subject = 0, index = 0;  // Benchmark::subjects[subject].questions[index]
  int shots = 0;               // examples kept
  bool cut = false;            // tokens cut from the front (no example left and still too long)
  bool one_pass = false;       // the four choices read from one sequence
  int64_t tokens = 0;          // the longest sequence's length
  std::array<int, 4> continuation_tokens{};
  std::string context;  // with keep_prompts
  std::vector<ChoiceSequence> sequences;
};

struct ScoredQuestion {
  PreparedQuestion prepared;
  std::array<double, 4> loglik{};
  int predicted = -1;       // acc: argmax of loglik (the first on ties, as numpy's argmax)
  int predicted_norm = -1;  // acc_norm: argmax of loglik / the choice's length in bytes ("A": 1)
  int answer = -1;
};

// The harness's encoding of one question (exposed for tests): context fitted to o.seq.
PreparedQuestion prepare_question(const data::Tokenizer& tok, const Benchmark& b, int subject, int index,
                                  const ScoreOptions& o);

// Every question of b, in subject and file order, on every rank (with --dump's contexts on rank 0).
// Prints a progress bar (this rank's questions, rate, ETA).
std::vector<ScoredQuestion> score_benchmark(model::LlamaModel& m, const data::Tokenizer& tok, const Benchmark& b,
                                            const ScoreOptions& o);

}  // namespace llamatrain::eval
