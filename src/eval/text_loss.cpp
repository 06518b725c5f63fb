// stream_loss and chat_loss (eval/text_loss.h).
#include "eval/text_loss.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "obs/progress.h"

namespace llamatrain::eval {

TextLoss stream_loss(model::LlamaModel& m, const std::string& prefix, const TextLossOptions& a,
                     const data::PieceLengths* lengths, const std::string& tokenizer) {
  const data::IndexedDataset ds(prefix);
  const int B = a.batch, T = a.seq;
  int64_t total = (ds.num_tokens() - 1) / T;
  if (a.max_windows > 0) total = std::min(total, a.max_windows);
  if (total < 1)
    fail("{}: {} tokens, expected at least seq-length + 1 = {} for one window\nhint: lower --seq-length", prefix,
         ds.num_tokens(), T + 1);
  obs::ProgressOptions po;
  po.label = "eval " + prefix;
  po.total = total;
  po.noun = "windows";
  obs::Progress progress(po);
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T), window(size_t(T) + 1);
  // Stream position: sequence seq, offset off; a window's last token is the next window's first.
  int64_t seq = 0, off = 0;
  auto next_tokens = [&](int32_t* out, int64_t n) {
    while (n > 0) {
      const int64_t len = ds.sequence_length(seq);
      const int64_t take = std::min(n, len - off);
      if (take > 0) {
        ds.read(seq, off, take, out);
        out += take;
        off += take;
        n -= take;
      }
      if (off == len) seq++, off = 0;
    }
  };
  next_tokens(window.data(), 1);
  TextLoss r;
  int64_t done = 0;
  while (done < total) {
    const int nb = int(std::min<int64_t>(B, total - done));
    for (int b = 0; b < nb; b++) {
      next_tokens(window.data() + 1, T);
      for (int t = 0; t < T; t++) {
        tokens[size_t(b) * T + t] = window[size_t(t)];
        targets[size_t(b) * T + t] = window[size_t(t) + 1];
      }
      window[0] = window[size_t(T)];
    }
    r.add(m.forward(tokens.data(), targets.data(), nb, T), targets.data(), int64_t(nb) * T, lengths, tokenizer);
    done += nb;
    progress.advance(nb);
  }
  progress.finish();
  r.windows = done;
  r.loss = r.loss_sum / double(r.targets);
  return r;
}

// The conversations of one JSONL file as training's fine-tuning data makes them (cfg: the template,
// seq-length, padding or packing), scored in order, each sample once: the assistant tokens' losses.
TextLoss chat_loss(model::LlamaModel& m, const std::string& file, const TextLossOptions& a, const data::Tokenizer& tok,
                   const data::SftConfig& cfg, const data::PieceLengths* lengths, const std::string& tokenizer) {
  data::SftStats stats;
  std::vector<data::SftExample> examples = data::load_sft_jsonl(file, tok, cfg, &stats);
  std::fprintf(stderr, "%s: %s\n", file.c_str(), data::format_sft_stats(stats).c_str());
  if (examples.empty())
    fail("{}: no usable conversation{}{}\nhint: rows are {{\"messages\": [{{\"role\": ..., \"content\": ...}}]}}, "
         "ShareGPT's {{\"conversations\": [{{\"from\": ..., \"value\": ...}}]}} or Alpaca's {{\"instruction\", "
         "\"input\", \"output\"}}, each with an assistant turn",
         file, stats.locations.empty() ? "" : "; rows rejected:\n  ", fmt::join(stats.locations, "\n  "));
  const int64_t conversations = int64_t(examples.size());
  const data::SftDataset ds(std::move(examples), cfg, 0, false);
  if (cfg.pack) std::fprintf(stderr, "%s: %s\n", file.c_str(), ds.describe_packing().c_str());
  const int B = a.batch, T = int(cfg.seq_length);
  const int64_t total = a.max_windows > 0 ? std::min(ds.size(), a.max_windows) : ds.size();
  obs::ProgressOptions po;
  po.label = "eval " + file;
  po.total = total;
  po.noun = "samples";
  obs::Progress progress(po);
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T), positions(size_t(B) * T),
      doc_start(size_t(B) * T);
  data::GptSample sample;
  TextLoss r;
  for (int64_t done = 0; done < total;) {
    const int nb = int(std::min<int64_t>(B, total - done));
    for (int b = 0; b < nb; b++) {
      ds.get(done + b, &sample);
      for (int t = 0; t < T; t++) {
        const size_t i = size_t(b) * T + size_t(t);
        tokens[i] = sample.tokens[size_t(t)];
        targets[i] = sample.loss_mask[size_t(t)] > 0 ? sample.labels[size_t(t)] : -100;
        positions[i] = sample.position_ids[size_t(t)];
        doc_start[i] = sample.doc_start[size_t(t)];
      }
    }
    // Packed samples hold several conversations: positions restart and attention stops at each.
    const model::Documents docs = cfg.pack ? model::Documents{positions.data(), doc_start.data()} : model::Documents{};
    r.add(m.forward(tokens.data(), targets.data(), nb, T, docs), targets.data(), int64_t(nb) * T, lengths, tokenizer);
    done += nb;
    progress.advance(nb);
  }
  progress.finish();
  r.windows = total;
  r.conversations = conversations;
  r.truncated = stats.truncated;
  r.skipped = stats.malformed;
  r.loss = r.targets > 0 ? r.loss_sum / double(r.targets) : NAN;
  return r;
}

}  // namespace llamatrain::eval
