// The new rows of a resized vocabulary; see vocab_resize.h. Means are summed in double in row order
// and rounded to float once, so every rank computes the same bits for a row.
#include "io/vocab_resize.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "data/piece_lengths.h"

namespace llamatrain::io {

namespace {

bool special(const data::Tokenizer& t, int id) { return t.is_control(id) || t.is_unknown(id) || t.is_unused(id); }

}  // namespace

NewTokenInit parse_new_token_init(const std::string& name) {
  if (name == "subword_mean") return NewTokenInit::subword_mean;
  if (name == "mean") return NewTokenInit::mean;
  if (name == "normal") return NewTokenInit::normal;
  fail("new token init: got '{}', expected subword_mean, mean or normal", name);
}

const char* new_token_init_name(NewTokenInit init) {
  switch (init) {
    case NewTokenInit::subword_mean: return "subword_mean";
    case NewTokenInit::mean: return "mean";
    case NewTokenInit::normal: return "normal";
  }
  return "?";
}

std::vector<int32_t> subword_split(const data::Tokenizer& literal_base, const data::Tokenizer& base,
                                   const data::Tokenizer& tokenizer, int id, int64_t base_rows) {
  if (special(tokenizer, id)) return {};
  const std::string piece = tokenizer.id_to_piece(id);
  if (tokenizer.is_byte(id)) {  // <0xE4>: the base's piece of the same byte
    const int b = base.piece_to_id(piece);
    if (b >= 0 && b < base_rows && base.is_byte(b)) return {b};
    return {};
  }
  // The piece's own characters, a leading U+2581 included, split without a dummy prefix.
  const std::vector<int> ids = literal_base.encode(data::piece_text(piece));
  std::vector<int32_t> out;
  for (const int i : ids) {
    if (i < 0 || i >= base_rows || base.is_unknown(i)) return {};
    out.push_back(i);
  }
  return out;
}

VocabGrowth plan_vocab_growth(int64_t base_rows, const data::Tokenizer& tokenizer, NewTokenInit init,
                              const std::string& base_tokenizer, float std, uint64_t seed) {
  VocabGrowth g;
  g.base_rows = base_rows;
  g.rows = tokenizer.vocab_size();
  g.init = init;
  g.base_tokenizer = base_tokenizer;
  g.std = std;
  g.seed = seed;
  CHECK(g.rows > base_rows, "vocabulary growth from {} to {} rows", base_rows, g.rows);
  if (base_tokenizer.empty()) {
    CHECK(init != NewTokenInit::subword_mean, "subword_mean needs the base tokenizer");
    return g;
  }
  const data::Tokenizer base(base_tokenizer);
  for (int id = 0; id < std::min(base.vocab_size(), tokenizer.vocab_size()); id++)
    if (tokenizer.id_to_piece(id) != base.id_to_piece(id))
      fail("tokenizer {} does not extend the checkpoint's tokenizer {}: piece {} is '{}' there and '{}' here, "
           "expected every base piece at its id\nhint: build the larger tokenizer with `llamatrain tokenizer merge "
           "{} ADD.model -o OUT.model`, which appends the new pieces after the base ones",
           tokenizer.path(), base_tokenizer, id, base.id_to_piece(id), tokenizer.id_to_piece(id), base_tokenizer);
  if (init != NewTokenInit::subword_mean) return g;
  const data::Tokenizer literal = base.literal();
  for (int64_t id = base_rows; id < g.rows; id++) {
    g.parts.push_back(subword_split(literal, base, tokenizer, int(id), base_rows));
    const auto& p = g.parts.back();
    if (!p.empty()) {
      g.by_parts++;
      g.parts_total += int64_t(p.size());
    } else if (special(tokenizer, int(id))) {
      g.by_mean_special++;
    } else {
      g.by_mean_no_split++;
    }
  }
  return g;
}

std::string VocabGrowth::describe() const {
  std::string s = fmt::format("vocabulary {} -> {} rows: {} new rows by {}", base_rows, rows, new_rows(),
                              new_token_init_name(init));
  switch (init) {
    case NewTokenInit::subword_mean:
      s += fmt::format(" (base tokenizer {}): {} the mean of their base pieces' rows ({:.2f} pieces each on average), "
                       "{} the mean of all {} rows",
                       base_tokenizer, by_parts, by_parts ? double(parts_total) / double(by_parts) : 0.0,
                       by_mean_special + by_mean_no_split, base_rows);
      if (by_mean_special + by_mean_no_split > 0)
        s += fmt::format(" ({} control, unknown or unused pieces, {} without a split into base pieces)",
                         by_mean_special, by_mean_no_split);
      break;
    case NewTokenInit::mean: s += fmt::format(" (each the mean of the {} base rows)", base_rows); break;
    case NewTokenInit::normal: s += fmt::format(" (N(0, {}), seed {})", std, seed); break;
  }
  return s;
}

void fill_new_rows(model::LlamaModel& m, const SafetensorsCheckpoint& ckpt, const VocabGrowth& g) {
  const int64_t C = m.config().dim, B = g.base_rows;
  const std::vector<int64_t> shape{B, C};
  std::vector<std::pair<std::string, std::string>> tensors = {{"model.embed_tokens.weight", "wte"}};
  if (!m.config().tie_embeddings) tensors.emplace_back("lm_head.weight", "wout");
  for (const auto& [hf, param] : tensors) {
    const model::ParamSpec* s = m.find_param(param);
    if (!s) continue;  // a pipeline stage without this tensor
    // The mean of all base rows, (C,), read in blocks of rows.
    std::vector<float> mean;
    auto base_mean = [&]() -> const std::vector<float>& {
      if (!mean.empty()) return mean;
      std::vector<double> sum(static_cast<size_t>(C), 0.0);
      const int64_t block = std::max<int64_t>(1, (int64_t(1) << 20) / C);
      std::vector<float> buf(size_t(block * C));
      for (int64_t r0 = 0; r0 < B; r0 += block) {
        const int64_t n = std::min(block, B - r0);
        ckpt.read_f32(hf, shape, r0 * C, n * C, buf.data());
        for (int64_t r = 0; r < n; r++)
          for (int64_t c = 0; c < C; c++) sum[size_t(c)] += double(buf[size_t(r * C + c)]);
      }
      mean.resize(size_t(C));
      for (int64_t c = 0; c < C; c++) mean[size_t(c)] = float(sum[size_t(c)] / double(B));
      return mean;
    };
    std::vector<float> row(static_cast<size_t>(C)), part(static_cast<size_t>(C));
    std::vector<double> sum(static_cast<size_t>(C));
    // new row r of the full tensor -> row
    auto compute = [&](int64_t r) {
      if (g.init == NewTokenInit::normal) {
        for (int64_t c = 0; c < C; c++)
          row[size_t(c)] = g.std * random_normal(g.seed, uint32_t(s->full_id), uint64_t(r * C + c));
        return;
      }
      const std::vector<int32_t>* parts = g.init == NewTokenInit::subword_mean ? &g.parts.at(size_t(r - B)) : nullptr;
      if (!parts || parts->empty()) {
        row = base_mean();
        return;
      }
      std::fill(sum.begin(), sum.end(), 0.0);
      for (const int32_t id : *parts) {
        ckpt.read_f32(hf, shape, int64_t(id) * C, C, part.data());
        for (int64_t c = 0; c < C; c++) sum[size_t(c)] += double(part[size_t(c)]);
      }
      for (int64_t c = 0; c < C; c++) row[size_t(c)] = float(sum[size_t(c)] / double(parts->size()));
    };
    float* dst = m.param_arena() + s->offset;
    s->shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
      CHECK(full % C == 0 && n % C == 0, "{}: a run of {} elements at {} is not whole rows of {}", param, n, full, C);
      for (int64_t r = std::max(full / C, B); r < std::min((full + n) / C, g.rows); r++) {
        compute(r);
        m.backend().write_elements(dst + local + (r * C - full), C, [&](float* h, int64_t first, int64_t count) {
          std::copy(row.begin() + first, row.begin() + first + count, h);
        });
      }
    });
  }
}

}  // namespace llamatrain::io
