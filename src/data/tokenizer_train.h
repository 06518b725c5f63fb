// `tokenizer train`: a SentencePiece model trained by SentencePiece's own trainer library on the
// documents of JSONL files (the strings under the JSON keys, as `preprocess` reads them) or text
// files (one sentence per line), fed through a SentenceIterator so nothing is written in between.
// Defaults are Llama 2's: BPE, byte fallback, split digits, identity normalization, no removal of
// extra whitespace, a dummy prefix, <unk> <s> </s> at 0 1 2 and no pad. Documents longer than
// max_sentence_length bytes are cut at line breaks (a longer line at a character boundary) and
// counted, never dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace llamatrain::data {

enum class TrainInputFormat { kAuto, kJsonl, kText };  // kAuto: by extension, else by the first line

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;
  std::vector<std::string> json_keys = {"text"};
  TrainInputFormat format = TrainInputFormat::kAuto;
  std::string output;  // OUT.model
  int vocab_size = 0;
  std::string model_type = "bpe";  // bpe, unigram, char, word
  double character_coverage = 0.9995;
  int threads = 0;                             // 0: every core
  int64_t input_sentence_size = 0;             // sentences sampled by the trainer; 0: all
  int max_sentence_length = 16384;             // bytes
  bool verbose = false;                        // the library's own log on stderr
  std::function<void(int64_t bytes)> on_read;  // input bytes read since the last call
  std::function<void()> on_read_done;          // all input read; the trainer's work starts
};

struct TokenizerTrainResult {
  std::vector<std::string> files;
  uint64_t input_bytes = 0;                        // the files' sizes
  int64_t documents = 0;                           // documents (JSONL values or text lines) given to the trainer
  int64_t sentences = 0;                           // what the trainer got: documents, long ones cut into several
  int64_t cut_documents = 0;                       // documents longer than max_sentence_length
  int64_t skipped_lines = 0;                       // blank, malformed or keyless lines
  std::vector<std::string> byte_order_mark_files;  // inputs that began with a UTF-8 BOM (not read as text)
  int pieces = 0;
  double read_seconds = 0, train_seconds = 0;
};

// Every document of the inputs in order (JSONL values under the keys, or text lines), whole; blank,
// malformed and keyless lines are counted in *skipped. For `tokenizer stats`.
std::vector<std::string> read_documents(const TokenizerTrainOptions& opt, int64_t* skipped);
// The files --input names, in order (folders and globs expanded).
std::vector<std::string> tokenizer_train_files(const TokenizerTrainOptions& opt);
// Trains and writes opt.output; throws Error for a missing or empty input, or a vocabulary size
// the text cannot give (the library's reason, with the fix).
TokenizerTrainResult run_tokenizer_train(const TokenizerTrainOptions& opt);

}  // namespace llamatrain::data
