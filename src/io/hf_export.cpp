// export_hf: see hf_export.h. The weights go through save_hf_checkpoint (the only writer of HF
// names); the tokenizer files describe Llama 2's LlamaTokenizer conventions (BOS added, EOS not).
#include "io/hf_export.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"

namespace llamatrain::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write_json(const fs::path& p, const json& j) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << j.dump(2) << "\n";
  f.flush();
  if (!f) fail("cannot write {}\nhint: check free disk space and permissions", p.string());
}

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

void check_export_target(const std::string& out_dir) {
  std::error_code ec;
  const fs::path out(out_dir);
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      fail("export folder {}: a file of that name exists, expected a folder or nothing\nhint: choose another "
           "output path",
           out_dir);
    if (!fs::is_empty(out, ec))
      fail("export folder {}: exists and is not empty, expected a new or empty folder\nhint: choose another "
           "output path or remove the old export",
           out_dir);
  }
  fs::path parent = fs::absolute(out, ec).parent_path();
  while (!parent.empty() && !fs::exists(parent, ec) && parent != parent.parent_path()) parent = parent.parent_path();
  if (::access(parent.c_str(), W_OK) != 0)
    fail("export folder {}: cannot write into {}, expected a writable location\nhint: choose an output path you "
         "can write to",
         out_dir, parent.string());
}

ExportReport export_hf(model::LlamaModel& m, const std::string& out_dir, const ExportOptions& o) {
  const std::string dtype = parse_export_dtype(o.torch_dtype);
  check_export_target(out_dir);
  const fs::path out = fs::absolute(out_dir);
  const fs::path tmp = out.parent_path() / fmt::format(".{}.tmp-{}", out.filename().string(), ::getpid());
  ExportReport report;
  report.dir = out.string();
  std::error_code ec;
  try {
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp);
    save_hf_checkpoint(m, tmp.string(), dtype, o.max_shard_bytes);
    const model::LlamaConfig& c = m.config();
    write_json(tmp / "generation_config.json",
               json{{"_from_model_config", true}, {"bos_token_id", c.bos_id}, {"eos_token_id", c.eos_id}});
    if (!o.tokenizer_model.empty()) {
      const data::Tokenizer tok(o.tokenizer_model);
      if (tok.vocab_size() > c.vocab_size)
        fail("tokenizer {}: {} pieces, but the model's vocab_size is {}, expected at most that\nhint: export with "
             "the tokenizer the model was trained with",
             o.tokenizer_model, tok.vocab_size(), c.vocab_size);
      fs::copy_file(o.tokenizer_model, tmp / "tokenizer.model");
      auto piece = [&](int id) { return id >= 0 && id < tok.vocab_size() ? json(tok.id_to_piece(id)) : json(nullptr); };
      write_json(tmp / "tokenizer_config.json",
                 json{{"tokenizer_class", "LlamaTokenizer"},
                      {"add_bos_token", true},
                      {"add_eos_token", false},
                      {"bos_token", piece(tok.bos_id())},
                      {"eos_token", piece(tok.eos_id())},
                      {"unk_token", piece(0)},
                      {"pad_token", piece(tok.pad_id())},
                      {"model_max_length", c.max_seq_len},
                      {"clean_up_tokenization_spaces", false},
                      {"legacy", true}});
      write_json(tmp / "special_tokens_map.json",
                 json{{"bos_token", piece(tok.bos_id())}, {"eos_token", piece(tok.eos_id())}, {"unk_token", piece(0)}});
    }
    for (const auto& e : fs::directory_iterator(tmp)) {
      const std::string name = e.path().filename().string();
      if (name.ends_with(".safetensors")) {
        report.bytes += int64_t(fs::file_size(e.path()));
        report.num_shards++;
      }
    }

    // Reload what was written and check it against the model.
    auto reloaded = load_hf_model(tmp.string(), model::Precision::fp32);
    const float* src = m.param_data();
    const float* got = reloaded->param_data();
    const bool as_bf16 = dtype == "bfloat16";
    for (int64_t i = 0; i < m.num_params(); i++) {
      const float want = as_bf16 ? to_float(to_bf16(src[i])) : src[i];
      if (!(got[i] == want) && !(std::isnan(got[i]) && std::isnan(want)))
        fail("export check: weight {} of {} reads back as {}, expected {}\nhint: the disk may be failing; the export "
             "was not kept",
             i, out_dir, got[i], want);
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

    if (fs::exists(out)) fs::remove(out);  // an empty folder (check_export_target allowed it)
    fs::rename(tmp, out);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    fail("export to {}: {} ({})\nhint: check the path, its permissions and free disk space", out_dir,
         e.code().message(), e.path1().string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return report;
}

}  // namespace llamatrain::io
