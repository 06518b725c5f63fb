// Supervised fine-tuning data: JSONL rows -> (prompt, completion) text -> BOS + prompt + completion
// + EOS token ids -> fixed-length samples (tokens, labels, loss_mask, position_ids) whose loss
// covers only the completion and its EOS. A prompt template with {field} placeholders and a
// completion map turn rows such as QNLI's {"question","sentence","label"} into prompt/answer
// pairs. Samples are padded (one example each) or packed (consecutive examples concatenated).
// Malformed rows are skipped and counted with their first file:line locations; over-long examples
// are truncated and counted. With a chat template (chat.h) rows are conversations or Alpaca records
// instead, and the loss covers every assistant turn of the rendered conversation.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer.h"

namespace llamatrain::data {

constexpr int32_t kIgnoreLabel = -100;  // label at padding positions (PyTorch's ignore_index)

struct SftConfig {
  std::string prompt_key = "input";  // used when prompt_template is empty
  std::string completion_key = "output";
  // "{question}\n{sentence}\nAnswer:" style template; {name} is the row's field (strings as is,
  // numbers/bools as JSON text), {{ and }} are literal braces. Empty = row[prompt_key].
  std::string prompt_template;
  // When non-empty the completion is completion_map[text of row[completion_key]] (e.g.
  // {"entailment": "yes", "not_entailment": "no"}); a value not in the map is a malformed row.
  std::map<std::string, std::string> completion_map;
  int64_t seq_length = 0;  // L: samples have L inputs from L + 1 text tokens
  int32_t pad_id = 0;      // input id at padding positions
  bool add_bos = true;
  bool add_eos = true;
  bool pack = false;                  // false: one padded sample per example
  bool truncate_prompt_left = false;  // false keeps the prompt's beginning (NeMo's 'right')
  int max_reported = 5;               // file:line locations kept per run
  // Set: rows are {"messages": [...]} or Alpaca records rendered with this template (the keys,
  // template, map, BOS/EOS and prompt truncation above are not used: the template places BOS/EOS).
  std::optional<ChatTemplate> chat;
};

struct SftStats {
  int64_t lines = 0;                       // lines read, blank ones included
  int64_t blank = 0;                       // whitespace-only lines (skipped silently)
  int64_t examples = 0;                    // rows turned into examples
  int64_t malformed = 0;                   // rows skipped; reasons below
  int64_t truncated = 0;                   // examples cut to fit seq_length + 1 tokens
  std::map<std::string, int64_t> reasons;  // malformed count per reason
  std::vector<std::string> locations;      // first max_reported "file:line: reason"
  bool byte_order_mark = false;            // the file began with a UTF-8 BOM (not read as text)
};

struct SftExample {
  std::vector<int32_t> text;  // BOS + prompt + completion + EOS, at most seq_length + 1 ids
  int64_t prompt_len = 0;     // loss covers predictions of text[prompt_len:] (chat: the first in-loss id)
  std::vector<uint8_t> loss;  // chat: (text size) 1 where predicting the id is trained; empty otherwise
};

// The input id of padding positions: the tokenizer's pad token, else 0 (Llama 2 has none); what
// training's fine-tuning samples and eval's scoring of them both use.
int32_t sft_pad_id(const Tokenizer& tok);

// Checks a template's braces; throws Error naming the position of a stray one.
void validate_prompt_template(std::string_view tmpl);
// Row -> prompt and completion text; false with *why (a short reason) for a malformed row.
bool sft_row_text(std::string_view json_line, const SftConfig& cfg, std::string* prompt, std::string* completion,
                  std::string* why);
// Tokenizes and truncates to seq_length + 1 ids; sets *truncated. Empty completion -> prompt_len
// == text size minus EOS (callers reject it).
SftExample tokenize_sft_example(const std::string& prompt, const std::string& completion, const Tokenizer& tok,
                                const SftConfig& cfg, bool* truncated);
// A chat or Alpaca row -> ids of the rendered conversation with its loss flags, cut to seq_length + 1
// ids (the end goes; *truncated says so); false with *why for a malformed row or one whose assistant
// tokens all fall beyond seq_length.
bool chat_sft_example(std::string_view json_line, const Tokenizer& tok, const SftConfig& cfg, SftExample* ex,
                      bool* truncated, std::string* why);
// Reads a JSONL file (fails naming it if it cannot be opened).
std::vector<SftExample> load_sft_jsonl(const std::string& path, const Tokenizer& tok, const SftConfig& cfg,
                                       SftStats* stats);
// One-line summary of stats for the log.
std::string format_sft_stats(const SftStats& s);

// Packing: groups of examples whose texts total <= capacity, every example in exactly one. The
// examples are taken in windows of `window` (in order, or shuffled by NumpyRandomState(seed) when
// shuffle is set, so the groups are a pure function of the data and the seed); inside a window,
// first-fit decreasing (longest first, each into the first open group it fits, else a new group),
// which leaves less padding than packing in order; a window's groups in the order they opened.
std::vector<std::vector<int64_t>> pack_sft_examples(const std::vector<SftExample>& examples, int64_t capacity,
                                                    uint32_t seed = 0, bool shuffle = false, int64_t window = 1024);
// The sample of one group of examples (one example when padding): inputs are the concatenated
// texts without their last id, labels shifted by one; loss_mask 1 exactly where the label is a
// completion or EOS id of the same example; positions restart at each example, and so do documents
// (doc_start: each example is one, the padding after them another); padding gets
// pad_id / kIgnoreLabel / 0.
void make_sft_sample(GptSample* out, const std::vector<const SftExample*>& group, const SftConfig& cfg);

// Examples grouped into samples, and an order per epoch: sample i (any epoch) is a pure function
// of (examples, seed, i). epoch e is shuffled with NumpyRandomState(seed + e) when shuffle is set.
class SftDataset {
 public:
  SftDataset(std::vector<SftExample> examples, SftConfig cfg, uint32_t seed, bool shuffle);
  int64_t size() const { return int64_t(groups_.size()); }  // samples per epoch
  void get(int64_t i, GptSample* out) const;
  // "packed E examples into S samples of L inputs, P% padding": the input positions no example fills.
  std::string describe_packing() const;

 private:
  std::vector<SftExample> examples_;
  SftConfig cfg_;
  uint32_t seed_;
  bool shuffle_;
  std::vector<std::vector<int64_t>> groups_;
  mutable std::mutex perm_mutex_;
  mutable int64_t perm_epoch_ = -1;
  mutable std::vector<int64_t> perm_;  // (size()) order of epoch perm_epoch_
};

}  // namespace llamatrain::data
