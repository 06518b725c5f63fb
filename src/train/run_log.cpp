// StepRecord and RunLog (train/run_log.h).
#include "train/run_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "obs/throughput.h"
#include "train/events.h"

namespace llamatrain::train {

std::vector<StepRecord::Metric> StepRecord::metrics(bool multi_rank) const {
  std::vector<Metric> m = {
      {"loss", "reduced_train_loss", loss},
      {"lr", "lr", lr},
      {"grad_norm", "grad_norm", grad_norm},
      {"consumed_samples", "consumed_samples", double(consumed_samples), true},
      {"step_time_s", "train_step_timing in s", step_s},
      {"tokens_per_s", "tokens_per_s", tokens_per_s},
      {"mfu", "mfu", mfu},
      {"comm_time_s", multi_rank ? "comm_time_s" : nullptr, comm_s},
      {"peak_rss_bytes", nullptr, peak_rss},
  };
  if (embedding_lr >= 0) m.insert(m.begin() + 2, {"embedding_lr", "embedding_lr", embedding_lr});
  if (device_memory >= 0) m.push_back({"device_memory_bytes", nullptr, device_memory});
  return m;
}

RunLog::RunLog(const Console& console, const std::string& log_dir, bool active, bool tensorboard, bool multi_rank)
    : console_(console), multi_rank_(multi_rank) {
  if (!active) return;
  metrics_.emplace((std::filesystem::path(log_dir) / "metrics.jsonl").string());
  if (tensorboard) tb_ = std::make_unique<obs::TensorBoardWriter>(log_dir);
}

void RunLog::step(const StepRecord& r) {
  const std::string comm =
      multi_rank_ ? fmt::format("| comm {} ({:.1f}%) ",
                                r.comm_s < 1 ? fmt::format("{:.1f}ms", 1e3 * r.comm_s) : obs::format_duration(r.comm_s),
                                100 * r.comm_s / r.step_s)
                  : "";
  console_.say(fmt::format(
      "step {}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.2f} seq/s | {} tok/s | MFU "
      "{:.1f}% {}| mem {} | ETA {}",
      r.step, r.max_steps, r.loss, r.lr, r.grad_norm, r.seq_per_s, obs::format_count(r.tokens_per_s), 100 * r.mfu, comm,
      r.device_memory >= 0
          ? fmt::format("{} GPU, {} host", obs::format_bytes(r.device_memory), obs::format_bytes(r.peak_rss))
          : obs::format_bytes(r.peak_rss),
      obs::format_duration(r.eta_s)));
  const auto metrics = r.metrics(multi_rank_);
  nlohmann::ordered_json fields{{"step", r.step}, {"max_steps", r.max_steps}};
  for (const auto& m : metrics) {
    if (m.integer)
      fields[m.key] = int64_t(m.value);
    else
      fields[m.key] = m.value;
  }
  console_.event(event_line("step", fields));
  if (metrics_) {
    nlohmann::ordered_json line{{"step", r.step}};
    for (const auto& m : metrics) {
      if (m.integer)
        line[m.key] = int64_t(m.value);
      else
        line[m.key] = m.value;
    }
    metrics_->write(line);
  }
  if (tb_) {
    for (const auto& m : metrics)
      if (m.tag) tb_->add_scalar(m.tag, float(m.value), r.step);
    tb_->flush();
  }
}

namespace {

// A validation's figures as metrics.jsonl keys: "val_loss", ... or, for a source, "val_loss/NAME", ...
void add_validation_fields(nlohmann::ordered_json& fields, const ValidationRecord& v) {
  const std::string at = v.name.empty() ? "" : "/" + v.name;
  fields["val_loss" + at] = v.loss;
  fields["val_ppl" + at] = std::exp(v.loss);
  if (!v.has_text) return;
  fields["val_bits_per_byte" + at] = v.bits_per_byte;
  fields["val_bits_per_char" + at] = v.bits_per_char;
  fields["val_tokens" + at] = v.tokens;
  fields["val_bytes" + at] = v.bytes;
  fields["val_chars" + at] = v.chars;
}

std::string validation_figures(const ValidationRecord& v) {
  return fmt::format(
      "loss {:.4f}, perplexity {:.2f}{}", v.loss, std::exp(v.loss),
      v.has_text ? fmt::format(", {:.4f} bits per byte, {:.4f} bits per character", v.bits_per_byte, v.bits_per_char)
                 : "");
}

}  // namespace

void RunLog::validation(const ValidationRecord& v) {
  console_.say(fmt::format("validation at step {}: {} ({} batch{}, {})", v.step, validation_figures(v), v.batches,
                           v.batches == 1 ? "" : "es", obs::format_duration(v.seconds)));
  size_t width = 0;
  for (const auto& s : v.sources) width = std::max(width, s.name.size());
  for (const auto& s : v.sources)
    console_.say(fmt::format("  {:<{}}  {} ({} targets)", s.name + ":", width + 1, validation_figures(s), s.tokens));
  nlohmann::ordered_json fields{{"step", v.step}};
  add_validation_fields(fields, v);
  for (const auto& s : v.sources) add_validation_fields(fields, s);
  nlohmann::ordered_json event = fields;
  event["batches"] = v.batches;
  event["seconds"] = v.seconds;
  console_.event(event_line("validation", event));
  if (metrics_) metrics_->write(fields);
  if (tb_) {
    auto scalars = [&](const ValidationRecord& r) {
      const std::string at = r.name.empty() ? "" : "/" + r.name;
      tb_->add_scalar("val_loss" + at, float(r.loss), v.step);
      if (r.has_text) {
        tb_->add_scalar("val_bits_per_byte" + at, float(r.bits_per_byte), v.step);
        tb_->add_scalar("val_bits_per_char" + at, float(r.bits_per_char), v.step);
      }
    };
    scalars(v);
    for (const auto& s : v.sources) scalars(s);
    tb_->flush();
  }
}

void RunLog::rollback(int64_t step, int64_t to_step, int64_t skipped_begin, int64_t skipped_end) {
  if (metrics_)
    metrics_->write(nlohmann::ordered_json{{"step", step},
                                           {"event", "rollback"},
                                           {"to_step", to_step},
                                           {"skipped_samples_begin", skipped_begin},
                                           {"skipped_samples_end", skipped_end}});
}

}  // namespace llamatrain::train
