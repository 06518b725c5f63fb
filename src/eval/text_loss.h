// Loss, perplexity and bits per byte and per character of a model on text (`llamatrain eval --data`
// and `--chat`):
// - stream_loss: a Megatron indexed dataset read in order as one token stream (documents concatenated,
//   as pretraining packs them), cut into windows of seq + 1 tokens with stride seq; every target of
//   every full window counts once, so the loss is the mean next-token cross-entropy over the stream.
// - chat_loss: fine-tuning conversations rendered and cut exactly as training's fine-tuning data does
//   (data/sft.h), one example per sample or packed (documents masked); only the assistant turns'
//   tokens are scored, so the loss is the figure training's validation reports for the same file.
// Bits per byte is the same losses summed, over ln 2 and the targets' bytes of text
// (data/piece_lengths.h; per character likewise). No shuffling: the same data gives the same figures.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "data/piece_lengths.h"
#include "model/llama.h"

namespace llamatrain::data {
class Tokenizer;
struct SftConfig;
}  // namespace llamatrain::data

namespace llamatrain::eval {

struct TextLossOptions {
  int seq = 256;            // stream_loss: tokens per window (chat_loss: the SftConfig's seq_length)
  int batch = 4;            // sequences per forward pass
  int64_t max_windows = 0;  // > 0: stop after that many windows (samples)
};

struct TextLoss {
  double loss = NAN;
  double loss_sum = 0;                                    // nats over every target
  int64_t windows = 0, targets = 0;                       // windows: the samples (chat)
  data::TextSums text;                                    // the targets' bytes and characters (with a tokenizer)
  int64_t conversations = 0, truncated = 0, skipped = 0;  // chat: rows scored, cut to fit, rejected
  double perplexity() const { return std::exp(loss); }
  // The targets' losses in bits over n units of their text (bytes: bits per byte; characters).
  double bits(int64_t n) const { return loss_sum / std::log(2.0) / double(n); }

  // One forward pass's outcome over its n (batch x seq) targets: the mean back to a sum, and the
  // targets' text.
  void add(const model::StepStats& st, const int32_t* targets_, int64_t n, const data::PieceLengths* lengths,
           const std::string& tokenizer) {
    if (st.num_valid > 0) loss_sum += double(st.loss) * double(st.num_valid);
    targets += st.num_valid;
    if (lengths) {
      const data::TextSums s = lengths->sum(targets_, n, tokenizer.c_str());
      text.tokens += s.tokens, text.bytes += s.bytes, text.chars += s.chars;
    }
  }
};

// The figures of one indexed dataset (PREFIX.bin/.idx); lengths (with the tokenizer's path, for
// messages) adds the bytes and characters. Prints a progress bar.
TextLoss stream_loss(model::LlamaModel& m, const std::string& prefix, const TextLossOptions& o,
                     const data::PieceLengths* lengths, const std::string& tokenizer);
// The assistant tokens' figures of one JSONL file of conversations under cfg (template, seq_length,
// padding or packing), each sample once, in order. Prints its counts and a progress bar.
TextLoss chat_loss(model::LlamaModel& m, const std::string& file, const TextLossOptions& o, const data::Tokenizer& tok,
                   const data::SftConfig& cfg, const data::PieceLengths* lengths, const std::string& tokenizer);

}  // namespace llamatrain::eval
