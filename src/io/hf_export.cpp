// export_hf: see hf_export.h. The weights go through save_hf_checkpoint (the only writer of HF
// names); the tokenizer files describe Llama 2's LlamaTokenizer conventions (BOS added, EOS not).
#include "io/hf_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"

namespace llamatrain::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Max |a - b| over the logits of the check tokens.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= m)) m = d;  // NaN propagates as the maximum
  }
  return m;
}

}  // namespace

std::string parse_export_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return "bfloat16";
  if (name == "fp32" || name == "float32") return "float32";
  fail("export dtype: got '{}', expected bf16 or fp32", name);
}

void check_export_target(const std::string& out_dir) { check_output_dir(out_dir, hf_export_files(), "export folder"); }

ExportReport export_hf(model::LlamaModel& m, const std::string& out_dir, const ExportOptions& o) {
  const std::string dtype = parse_export_dtype(o.torch_dtype);
  AtomicDir out(out_dir, hf_export_files());
  const std::string tmp = out.temp_path();
  ExportReport report;
  report.dir = out_dir;
  write_hf_weights(m, tmp, dtype, o.max_shard_bytes, o.progress);
  const model::LlamaConfig& c = m.config();
  write_file_atomic(out.file("generation_config.json"),
                    json{{"_from_model_config", true}, {"bos_token_id", c.bos_id}, {"eos_token_id", c.eos_id}}.dump(2) +
                        "\n");
  if (!o.tokenizer_model.empty()) {
    const data::Tokenizer tok(o.tokenizer_model);
    if (tok.vocab_size() > c.vocab_size)
      fail("tokenizer {}: {} pieces, but the model's vocab_size is {}, expected at most that\nhint: export with "
           "the tokenizer the model was trained with",
           o.tokenizer_model, tok.vocab_size(), c.vocab_size);
    const MappedFile bytes(o.tokenizer_model, "tokenizer");
    write_file_atomic(out.file("tokenizer.model"),
                      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    auto piece = [&](int id) { return id >= 0 && id < tok.vocab_size() ? json(tok.id_to_piece(id)) : json(nullptr); };
    write_file_atomic(out.file("tokenizer_config.json"),
                      json{{"tokenizer_class", "LlamaTokenizer"},
                           {"add_bos_token", true},
                           {"add_eos_token", false},
                           {"bos_token", piece(tok.bos_id())},
                           {"eos_token", piece(tok.eos_id())},
                           {"unk_token", piece(0)},
                           {"pad_token", piece(tok.pad_id())},
                           {"model_max_length", c.max_seq_len},
                           {"clean_up_tokenization_spaces", false},
                           {"legacy", true}}
                              .dump(2) +
                          "\n");
    write_file_atomic(out.file("special_tokens_map.json"),
                      json{{"bos_token", piece(tok.bos_id())}, {"eos_token", piece(tok.eos_id())}, {"unk_token", piece(0)}}
                              .dump(2) +
                          "\n");
  }
  for (const auto& e : fs::directory_iterator(tmp)) {
    if (e.path().filename().string().ends_with(".safetensors")) {
      report.bytes += int64_t(e.file_size());
      report.num_shards++;
    }
  }

  // Reload what was written and check it against the model before the folder appears.
  // Tensor by tensor: the model's arena may hold padding rows of the vocabulary that the export (and
  // the reloaded model) does not have.
  auto reloaded = load_hf_model(tmp, model::Precision::fp32);
  // Tensor by tensor, by name: the arenas' orders differ when the model has frozen tensors (they come
  // first), and a tensor's padding rows (its last elements) are not compared.
  const bool as_bf16 = dtype == "bfloat16";
  for (const model::ParamSpec& s : m.param_specs()) {
    const model::ParamSpec* r = reloaded->find_param(s.name);
    CHECK(r != nullptr && r->shard.numel() == s.shard.numel(), "export check: tensor {} in the reloaded model", s.name);
    const float* src = m.param_data() + s.offset;
    const float* got = reloaded->param_data() + r->offset;
    for (int64_t i = 0; i < s.shard.numel(); i++) {
      const float want = as_bf16 ? to_float(to_bf16(src[i])) : src[i];
      if (!(got[i] == want) && !(std::isnan(got[i]) && std::isnan(want)))
        fail("export check: element {} of {} in {} reads back as {}, expected {}\nhint: the disk may be failing; the "
             "export was not kept",
             i, s.name, out_dir, got[i], want);
    }
  }
  const int T = std::min(16, c.max_seq_len);
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  for (int t = 0; t < T; t++)
    tokens[size_t(t)] = t == 0 ? c.bos_id : int32_t(random_u32(17, 0, 0, uint64_t(t)) % uint32_t(c.vocab_size));
  std::vector<float> a(size_t(T) * c.vocab_size), b(a.size());
  m.forward(tokens.data(), nullptr, 1, T);
  m.logits(a.data());
  reloaded->forward(tokens.data(), nullptr, 1, T);
  reloaded->logits(b.data());
  double scale = 1;
  for (float v : a) scale = std::max(scale, double(std::fabs(v)));
  const bool exact = !as_bf16 && m.precision() == model::Precision::fp32;
  report.tolerance = exact ? 1e-6 * scale : 5e-2 * scale;
  report.max_abs_logit_diff = max_abs_diff(a, b);
  if (!(report.max_abs_logit_diff <= report.tolerance))
    fail("export check: logits of the reloaded export differ from the model's by {:.3g}, expected at most {:.3g}\n"
         "hint: this is a bug in the export; the export was not kept",
         report.max_abs_logit_diff, report.tolerance);
  reloaded.reset();
  out.commit();
  return report;
}

}  // namespace llamatrain::io
