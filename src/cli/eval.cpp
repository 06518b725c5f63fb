// `llamatrain eval MODEL --data PREFIX ...`: loss, perplexity, bits per byte and bits per character
// of a checkpoint or Hugging Face folder on Megatron indexed datasets. Each dataset is read in order
// as one token stream (documents concatenated, as pretraining packs them) cut into windows of
// seq-length + 1 tokens with stride seq-length; every target of every full window counts once, so the
// loss is the mean next-token cross-entropy over the stream, and bits per byte is the same losses
// summed, over ln 2 and the targets' bytes of text (data/piece_lengths.h; per character likewise).
// No shuffling: the same data gives the same figures. Without a tokenizer (the folder's
// tokenizer.model or tokenizer.json, or --tokenizer) the per-byte figures are left out.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/file.h"
#include "data/indexed_dataset.h"
#include "data/piece_lengths.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"
#include "obs/progress.h"

namespace llamatrain::cli {

namespace {

struct EvalArgs {
  std::string model_dir;
  std::vector<std::string> prefixes;
  int seq = 256;
  int batch = 4;
  int64_t max_windows = 0;
  std::string precision = "fp32";
  std::string device = "cpu";
  std::string tokenizer;  // "" : MODEL/tokenizer.model (else tokenizer.json) if there is one
  bool json = false;
};

struct EvalResult {
  double loss = NAN;
  double loss_sum = 0;  // nats over every target
  int64_t windows = 0, targets = 0;
  data::TextSums text;  // the targets' bytes and characters (with a tokenizer)
  double bits(int64_t n) const { return loss_sum / std::log(2.0) / double(n); }
};

EvalResult eval_prefix(model::LlamaModel& m, const std::string& prefix, const EvalArgs& a,
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
  EvalResult r;
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
    const model::StepStats st = m.forward(tokens.data(), targets.data(), nb, T);
    r.loss_sum += double(st.loss) * double(st.num_valid);  // the mean over the targets, back to their sum
    r.targets += st.num_valid;
    if (lengths) {
      const data::TextSums s = lengths->sum(targets.data(), int64_t(nb) * T, tokenizer.c_str());
      r.text.tokens += s.tokens, r.text.bytes += s.bytes, r.text.chars += s.chars;
    }
    done += nb;
    progress.advance(nb);
  }
  progress.finish();
  r.windows = done;
  r.loss = r.loss_sum / double(r.targets);
  return r;
}

// The tokenizer the per-byte figures need: --tokenizer, else the model folder's (tokenizer.model,
// else tokenizer.json), else none.
std::string find_tokenizer(const EvalArgs& a) {
  if (!a.tokenizer.empty()) return a.tokenizer;
  const std::string inside = data::resolve_tokenizer_path(a.model_dir, data::TokenizerLibrary::kAuto);
  return is_regular_file(inside) ? inside : "";
}

void run_eval(const EvalArgs& a) {
  const auto precision = model::parse_precision(a.precision);
  const model::Device device = model::choose_device(a.device, "--device");
  const std::string tokenizer_path = find_tokenizer(a);
  std::optional<data::PieceLengths> lengths;
  if (!tokenizer_path.empty()) lengths = data::piece_lengths(data::Tokenizer(tokenizer_path));
  auto m = io::load_hf_model(a.model_dir, precision, device);
  if (a.seq > m->config().max_seq_len)
    fail("--seq-length {}: the model's context is {} tokens, expected at most that", a.seq, m->config().max_seq_len);
  if (!lengths)
    std::fprintf(stderr,
                 "note: bits per byte and per character left out: %s has no tokenizer.model (give one with "
                 "--tokenizer)\n",
                 a.model_dir.c_str());
  for (const auto& prefix : a.prefixes) {
    const EvalResult r = eval_prefix(*m, prefix, a, lengths ? &*lengths : nullptr, tokenizer_path);
    if (a.json) {
      nlohmann::ordered_json j{{"data", prefix},        {"loss", r.loss},       {"perplexity", std::exp(r.loss)},
                               {"windows", r.windows}, {"targets", r.targets}, {"loss_sum", r.loss_sum}};
      if (lengths) {
        j["bits_per_byte"] = r.bits(r.text.bytes);
        j["bits_per_char"] = r.bits(r.text.chars);
        j["bytes"] = r.text.bytes;
        j["chars"] = r.text.chars;
        j["tokenizer"] = tokenizer_path;
      }
      std::printf("%s\n", j.dump().c_str());
    } else {
      const std::string text =
          lengths ? fmt::format(", {:.4f} bits per byte, {:.4f} bits per character", r.bits(r.text.bytes),
                                r.bits(r.text.chars))
                  : "";
      const std::string counts =
          lengths ? fmt::format("; {} bytes, {} characters", r.text.bytes, r.text.chars) : "";
      std::printf("%s: loss %.4f, perplexity %.2f%s (%lld windows of %d tokens%s)\n", prefix.c_str(), r.loss,
                  std::exp(r.loss), text.c_str(), (long long)r.windows, a.seq, counts.c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace

void register_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand(
      "eval", "Loss, perplexity and bits per byte / per character of a checkpoint or Hugging Face folder on datasets");
  cmd->footer(
      "Each --data prefix (a Megatron .bin/.idx pair) is read in order as one token stream and cut into windows\n"
      "of --seq-length + 1 tokens (stride --seq-length); the loss is the mean cross-entropy of every target.\n"
      "Bits per byte is the targets' losses summed, in bits, over the UTF-8 bytes of text they stand for\n"
      "(per character likewise): unlike perplexity it compares models with different tokenizers on the same\n"
      "text. It needs the tokenizer: the model folder's tokenizer.model or tokenizer.json, or --tokenizer.\n\n"
      "Examples:\n"
      "  llamatrain eval runs/zh/checkpoints/step_500 --data data/zh_val_text_document --data data/en_val_text_document\n"
      "  llamatrain eval /models/Llama-2-7b-hf --data data/book_text_document --seq-length 4096 --batch 1 "
      "--max-windows 64 --precision bf16-mixed\n"
      "  llamatrain eval runs/zh/hf --data data/zh_val_text_document --json | jq .bits_per_char   # vs the base model's\n"
      "  llamatrain eval runs/pretrain/checkpoints/step_100 --data data/val_text_document --tokenizer tokenizer.model\n");
  cmd->add_option("model", a->model_dir, "checkpoint folder (step_N) or Hugging Face folder")->required();
  cmd->add_option("--data", a->prefixes, "dataset prefix (repeatable)")->required();
  cmd->add_option("--seq-length", a->seq, "tokens per window")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--batch", a->batch, "windows per forward pass")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-windows", a->max_windows, "stop after this many windows per dataset (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--precision", a->precision, "fp32 | bf16-mixed | bf16-sr")->capture_default_str();
  add_device_option(cmd, &a->device);
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.model or tokenizer.json the data was made with (default: the model folder's, if it "
                  "has one)");
  cmd->add_flag("--json", a->json, "one JSON object per dataset on stdout");
  cmd->callback([a] { run_eval(*a); });
}

}  // namespace llamatrain::cli
