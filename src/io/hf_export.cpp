// export_hf: see hf_export.h. The weights go through write_hf_weights (the only writer of HF names);
// the tokenizer files are the source's own, byte for byte, and for a bare tokenizer.model the
// tokenizer_config.json of Llama 2's LlamaTokenizer conventions (BOS added, EOS not).
#include "io/hf_export.h"

#include <algorithm>
#include <climits>
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

// generation_config.json: the token ids generation starts and stops with, as transformers writes them
// (eos_token_id a list when the model stops on several ids, no bos_token_id when it has none).
std::string generation_config_json(const model::LlamaConfig& c) {
  json g = {{"_from_model_config", true}};
  if (c.bos_id >= 0) g["bos_token_id"] = c.bos_id;
  if (c.extra_eos_ids.empty()) {
    g["eos_token_id"] = c.eos_id;
  } else {
    json eos = json::array({c.eos_id});
    for (int id : c.extra_eos_ids) eos.push_back(id);
    g["eos_token_id"] = eos;
  }
  return g.dump(2) + "\n";
}

// The source folder's generation_config.json when it parses and its token ids fit the model's
// vocabulary (then copied byte for byte); "" otherwise, with *why saying what was wrong.
std::string release_generation_config(const std::string& source_dir, const model::LlamaConfig& c, std::string* why) {
  const fs::path path = fs::path(source_dir) / "generation_config.json";
  std::error_code ec;
  if (source_dir.empty() || !fs::is_regular_file(path, ec)) return "";
  std::string text;
  {
    const MappedFile bytes(path.string(), "generation config");
    text.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  const json g = json::parse(text, nullptr, false);
  if (!g.is_object()) {
    *why = path.string() + " is not a JSON object";
    return "";
  }
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (!g.contains(key) || g[key].is_null()) continue;
    const json ids = g[key].is_array() ? g[key] : json::array({g[key]});
    for (const json& id : ids)
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= c.vocab_size) {
        *why =
            fmt::format("{}: {} {} is not a token id below vocab_size {}", path.string(), key, id.dump(), c.vocab_size);
        return "";
      }
  }
  return text;
}

const HfExtraFile* find_file(const std::vector<HfExtraFile>& files, const std::string& name) {
  for (const auto& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

// A SentencePiece tokenizer.model: LlamaTokenizer's tokenizer_config.json and special_tokens_map.json
// (BOS added, EOS not), unless the source has its own, which are copied.
void write_sentencepiece_files(AtomicDir& out, const std::vector<HfExtraFile>& files, const std::string& source,
                               const model::LlamaConfig& c) {
  const HfExtraFile& model_file = *find_file(files, "tokenizer.model");
  const data::Tokenizer tok = data::Tokenizer::from_file_bytes(model_file.bytes, source);
  if (tok.vocab_size() > c.vocab_size)
    fail("tokenizer {}: {} pieces, but the model's vocab_size is {}, expected at most that\nhint: export with "
         "the tokenizer the model was trained with",
         source, tok.vocab_size(), c.vocab_size);
  auto piece = [&](int id) { return id >= 0 && id < tok.vocab_size() ? json(tok.id_to_piece(id)) : json(nullptr); };
  if (!find_file(files, "tokenizer_config.json"))
    write_file_atomic(out.file("tokenizer_config.json"), json{{"tokenizer_class", "LlamaTokenizer"},
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
  if (!find_file(files, "special_tokens_map.json"))
    write_file_atomic(
        out.file("special_tokens_map.json"),
        json{{"bos_token", piece(tok.bos_id())}, {"eos_token", piece(tok.eos_id())}, {"unk_token", piece(0)}}.dump(2) +
            "\n");
}

// A Hugging Face tokenizer.json: copied as it is, with its tokenizer_config.json, or a plain
// PreTrainedTokenizerFast one naming the model's BOS/EOS tokens when the source has none.
void write_tokenizer_json_files(AtomicDir& out, const std::vector<HfExtraFile>& files, const std::string& source,
                                const model::LlamaConfig& c) {
  const HfExtraFile& tj = *find_file(files, "tokenizer.json");
  const TokenizerJsonVocab vocab = tokenizer_json_vocab(tj.bytes, source);
  if (vocab.size > c.vocab_size)
    fail("tokenizer {}: {} tokens (ids 0..{}), but the model's vocab_size is {}, expected at most that\nhint: "
         "export with the tokenizer.json the model was trained with (training with a larger tokenizer grows the "
         "model to it; an export copies tokenizer.json as it is, never extends it)",
         source, vocab.size, vocab.size - 1, c.vocab_size);
  if (find_file(files, "tokenizer_config.json")) return;
  auto token = [&](int id) {
    auto it = vocab.added.find(id);
    return it == vocab.added.end() ? json(nullptr) : json(it->second);
  };
  json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
             {"model_max_length", c.max_seq_len},
             {"clean_up_tokenization_spaces", false},
             {"eos_token", token(c.eos_id)}};
  if (c.bos_id >= 0) tc["bos_token"] = token(c.bos_id);
  write_file_atomic(out.file("tokenizer_config.json"), tc.dump(2) + "\n");
}

// The tokenizer files of the source, then the ones the source lacks.
void write_tokenizer_files(AtomicDir& out, const std::string& source, const model::LlamaConfig& c) {
  const std::vector<HfExtraFile> files = tokenizer_source_files(source);
  for (const auto& f : files) write_file_atomic(out.file(f.name), f.bytes);
  if (find_file(files, "tokenizer.json"))
    write_tokenizer_json_files(out, files, source, c);
  else
    write_sentencepiece_files(out, files, source, c);
}

}  // namespace

std::vector<HfExtraFile> tokenizer_source_files(const std::string& source) {
  std::error_code ec;
  const bool folder = fs::is_directory(source, ec);
  if (!folder && !fs::is_regular_file(source, ec))
    fail("tokenizer {}: does not exist, expected a tokenizer.model, a tokenizer.json or a folder holding one\n"
         "hint: check the path",
         source);
  const fs::path dir = folder ? fs::path(source) : fs::path(source).parent_path();
  const std::string file = folder ? "" : fs::path(source).filename().string();
  auto read = [](const fs::path& p) {
    const MappedFile bytes(p.string(), "tokenizer file");
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  std::vector<HfExtraFile> out;
  if (!folder && file != "tokenizer.json") {  // a SentencePiece model under any name: that file alone
    out.push_back({"tokenizer.model", read(source)});
    return out;
  }
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"})
    if (fs::is_regular_file(dir / name, ec)) out.push_back({name, read(dir / name)});
  if (!find_file(out, "tokenizer.json") && !find_file(out, "tokenizer.model"))
    fail("tokenizer {}: the folder holds neither tokenizer.json nor tokenizer.model, expected one of them\n"
         "hint: copy the model's tokenizer files there, or name the tokenizer file",
         source);
  return out;
}

TokenizerJsonVocab tokenizer_json_vocab(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("tokenizer {}: tokenizer.json is not valid JSON ({}), expected a Hugging Face tokenizer file\nhint: fix or "
         "re-download tokenizer.json",
         name, e.what());
  }
  TokenizerJsonVocab v;
  int64_t top = -1;
  auto id_of = [&](const json& id, const std::string& what) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX)
      fail("tokenizer {}: {} has id {}, expected a non-negative integer\nhint: fix or re-download tokenizer.json", name,
           what, id.dump());
    top = std::max(top, id.get<int64_t>());
    return int(id.get<int64_t>());
  };
  const json* model = j.is_object() && j.contains("model") ? &j["model"] : nullptr;
  if (!model || !model->is_object() || !model->contains("vocab"))
    fail("tokenizer {}: tokenizer.json has no model.vocab, expected a Hugging Face tokenizer file\nhint: fix or "
         "re-download tokenizer.json",
         name);
  const json& vocab = (*model)["vocab"];
  if (vocab.is_object()) {  // BPE, WordPiece: {"token": id}
    for (const auto& [token, id] : vocab.items()) id_of(id, "token " + token);
  } else if (vocab.is_array()) {  // Unigram: [[token, score], ...], ids by position
    top = std::max(top, int64_t(vocab.size()) - 1);
  } else {
    fail("tokenizer {}: model.vocab is a JSON {}, expected an object or a list\nhint: fix or re-download "
         "tokenizer.json",
         name, vocab.type_name());
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const json& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t.contains("content") || !t["content"].is_string())
        fail("tokenizer {}: an added_tokens entry is {}, expected an object with id and content\nhint: fix or "
             "re-download tokenizer.json",
             name, t.dump().substr(0, 80));
      v.added[id_of(t["id"], "added token " + t["content"].get<std::string>())] = t["content"].get<std::string>();
    }
  v.size = int(top + 1);
  return v;
}

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
  std::string why;
  const std::string release = release_generation_config(o.source_dir, c, &why);
  write_file_atomic(out.file("generation_config.json"), release.empty() ? generation_config_json(c) : release);
  report.generation_config = !release.empty() ? "kept from " + o.source_dir
                             : why.empty()    ? "written from the model's config"
                                              : "written from the model's config (" + why + ")";
  if (!o.tokenizer_model.empty()) write_tokenizer_files(out, o.tokenizer_model, c);
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
    const float* got = reloaded->param_data() + r->offset;  // (the reloaded model is on the cpu)
    m.backend().read_elements(
        m.param_arena() + s.offset, s.shard.numel(), [&](const float* src, int64_t first, int64_t n) {
          for (int64_t j = 0; j < n; j++) {
            const int64_t i = first + j;
            const float want = as_bf16 ? to_float(to_bf16(src[j])) : src[j];
            if (!(got[i] == want) && !(std::isnan(got[i]) && std::isnan(want)))
              fail("export check: element {} of {} in {} reads back as {}, expected {}\nhint: the disk may be failing; "
                   "the export was not kept",
                   i, s.name, out_dir, got[i], want);
          }
        });
  }
  const int T = std::min(16, c.max_seq_len);
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  for (int t = 0; t < T; t++)
    tokens[size_t(t)] =
        t == 0 && c.bos_id >= 0 ? c.bos_id : int32_t(random_u32(17, 0, 0, uint64_t(t)) % uint32_t(c.vocab_size));
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
