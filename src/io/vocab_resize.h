// Growing a Hugging Face checkpoint's vocabulary to a larger tokenizer that extends the checkpoint's
// own (every base piece at its id, new pieces after them): the embedding and the output layer get the
// tokenizer's rows; rows below the checkpoint's vocab_size are its rows, unchanged, and each new row
// is chosen by NewTokenInit. Every value is a function of the checkpoint, the two tokenizers, the
// seed and the row's place in the full tensor, so a tensor-parallel rank filling its own rows gets
// one process's values. The split rule and the choices are documented in docs/training.md
// ("Extending the vocabulary"); the mean rows carry no noise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "io/safetensors.h"
#include "model/llama.h"

namespace llamatrain::io {

enum class NewTokenInit {
  subword_mean,  // the mean of the base rows of the pieces the base tokenizer splits the piece's text into
  mean,          // the mean of all base rows
  normal,        // N(0, std), the value random init gives that element
};
NewTokenInit parse_new_token_init(const std::string& name);  // Error for anything else
const char* new_token_init_name(NewTokenInit init);

// What a resize adds: rows [base_rows, rows) of model.embed_tokens.weight and lm_head.weight.
struct VocabGrowth {
  int64_t base_rows = 0, rows = 0;  // the checkpoint's vocab_size -> the tokenizer's pieces
  NewTokenInit init = NewTokenInit::subword_mean;
  std::string base_tokenizer;  // the checkpoint folder's tokenizer.model ("" when it has none)
  float std = 0.02f;           // normal: the standard deviation
  uint64_t seed = 0;           // normal: the run's seed
  // subword_mean: parts[i] = the base ids whose rows new row base_rows + i averages (with repeats, in
  // the split's order); empty: no usable split, the row is the mean of all base rows.
  std::vector<std::vector<int32_t>> parts;
  // subword_mean's count of new rows by how they were made.
  int64_t by_parts = 0, parts_total = 0;              // rows from a split, and their pieces in all
  int64_t by_mean_special = 0, by_mean_no_split = 0;  // control / unknown / unused pieces; splits with <unk>

  bool active() const { return rows > base_rows; }
  int64_t new_rows() const { return rows - base_rows; }
  // "vocabulary 512 -> 768 rows: 256 new rows by subword_mean (base tokenizer DIR/tokenizer.model): ..."
  std::string describe() const;
};

// The base tokenizer's split of one piece of another tokenizer, by the rule above: the ids (each a
// base piece below base_rows), or empty when the piece has no usable split (a control, unknown or
// unused piece; a text that the base splits into <unk> or into nothing).
std::vector<int32_t> subword_split(const data::Tokenizer& literal_base, const data::Tokenizer& base,
                                   const data::Tokenizer& tokenizer, int id, int64_t base_rows);

// The growth from a checkpoint of base_rows rows to `tokenizer` (more pieces than base_rows). With
// base_tokenizer (a path, or ""): checks that `tokenizer` keeps each of its pieces at its id, and
// for subword_mean splits every new piece. Errors name the keys: subword_mean without a base tokenizer,
// a tokenizer that does not extend the base one.
VocabGrowth plan_vocab_growth(int64_t base_rows, const data::Tokenizer& tokenizer, NewTokenInit init,
                              const std::string& base_tokenizer, float std, uint64_t seed);

// Writes the new rows of the embedding and (untied) output layer that this rank's model holds, from
// the checkpoint's base rows; the model's config has growth.rows rows. Leaves params_changed() to
// the caller.
void fill_new_rows(model::LlamaModel& model, const SafetensorsCheckpoint& checkpoint, const VocabGrowth& growth);

}  // namespace llamatrain::io
