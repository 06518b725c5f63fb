// `llamatrain data inspect|merge`: look inside a Megatron indexed dataset (header, counts, checks,
// token statistics, first documents) and concatenate datasets like Megatron's merge_datasets.py.
// Argument parsing and printing only; the format lives in src/data/indexed_dataset.h.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace llamatrain::cli {

namespace {

// Quoted, escaped, cut to max_bytes (a cut UTF-8 character is replaced, never printed broken).
std::string quoted(const std::string& text, size_t max_bytes) {
  std::string cut = text.size() > max_bytes ? text.substr(0, max_bytes) : text;
  std::string q = nlohmann::json(cut).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return text.size() > max_bytes ? q + " ..." : q;
}

struct InspectArgs {
  std::string prefix;
  int docs = 3;
  std::string tokenizer_model;
  int max_tokens_shown = 64;
};

void run_inspect(const InspectArgs& a) {
  data::IndexedDataset ds(a.prefix);  // validates everything; throws Error naming the file and field
  std::optional<data::Tokenizer> tok;
  if (!a.tokenizer_model.empty()) tok.emplace(a.tokenizer_model);

  const int64_t S = ds.num_sequences(), D = ds.num_documents();
  std::printf("dataset %s\n", a.prefix.c_str());
  std::printf("  %s: %llu bytes, magic MMIDIDX, version %llu, dtype %s (code %d, %d bytes/token)\n",
              data::index_path(a.prefix).c_str(), static_cast<unsigned long long>(ds.idx_size()),
              static_cast<unsigned long long>(data::kIndexVersion), data::dtype_name(ds.dtype()),
              static_cast<int>(ds.dtype()), data::dtype_itemsize(ds.dtype()));
  std::printf("  %s: %llu bytes\n", data::data_path(a.prefix).c_str(), static_cast<unsigned long long>(ds.bin_size()));
  std::printf("  sequences %lld, documents %lld, tokens %lld\n", static_cast<long long>(S), static_cast<long long>(D),
              static_cast<long long>(ds.num_tokens()));
  std::printf("  checks: ok (idx size = 34 + 12*S + 8*D, pointers contiguous from 0, .bin size = %llu bytes = "
              "tokens * itemsize, document_indices 0..S non-decreasing)\n",
              static_cast<unsigned long long>(ds.bin_size()));

  // Token statistics: lengths from the index, id range from one pass over the .bin.
  int64_t min_len = std::numeric_limits<int64_t>::max(), max_len = 0, empty = 0;
  int64_t min_id = std::numeric_limits<int64_t>::max(), max_id = std::numeric_limits<int64_t>::min();
  std::vector<int64_t> buf;
  for (int64_t i = 0; i < S; ++i) {
    int64_t n = ds.sequence_length(i);
    min_len = std::min(min_len, n);
    max_len = std::max(max_len, n);
    empty += n == 0;
    buf.resize(n);
    ds.read(i, 0, n, buf.data());
    for (int64_t t : buf) min_id = std::min(min_id, t), max_id = std::max(max_id, t);
  }
  if (S > 0)
    std::printf("  tokens/sequence: min %lld, mean %.1f, max %lld; empty sequences %lld\n",
                static_cast<long long>(min_len), static_cast<double>(ds.num_tokens()) / S,
                static_cast<long long>(max_len), static_cast<long long>(empty));
  if (ds.num_tokens() > 0) {
    std::printf("  token ids: min %lld, max %lld", static_cast<long long>(min_id), static_cast<long long>(max_id));
    if (tok) {
      std::printf(" (tokenizer vocab %d: %s)", tok->vocab_size(),
                  max_id < tok->vocab_size() && min_id >= 0 ? "all in range" : "OUT OF RANGE");
    }
    std::printf("\n");
    if (tok && (max_id >= tok->vocab_size() || min_id < 0))
      fail("{}: token id {} is outside the vocab of {} (size {}), expected ids in [0, {})\nhint: this dataset was made "
           "with another tokenizer; re-run llamatrain preprocess with the model's tokenizer.model",
           data::data_path(a.prefix), max_id >= tok->vocab_size() ? max_id : min_id, a.tokenizer_model,
           tok->vocab_size(), tok->vocab_size());
  }

  // First documents: ids, or decoded text with a tokenizer.
  const int64_t show = std::min<int64_t>(a.docs, D);
  for (int64_t k = 0; k < show; ++k) {
    std::vector<int> ids;
    for (int64_t i = ds.document_index(k); i < ds.document_index(k + 1); ++i) {
      auto seq = ds.sequence(i);
      ids.insert(ids.end(), seq.begin(), seq.end());
    }
    std::printf("  document %lld (%zu tokens):", static_cast<long long>(k), ids.size());
    if (tok) {
      std::string text = tok->decode(ids);
      std::printf(" %s\n", quoted(text, 400).c_str());
    } else {
      size_t n = std::min<size_t>(ids.size(), a.max_tokens_shown);
      for (size_t j = 0; j < n; ++j) std::printf(" %d", ids[j]);
      std::printf("%s\n", n < ids.size() ? " ..." : "");
    }
  }
}

struct MergeArgs {
  std::string out;                  // output prefix
  std::vector<std::string> inputs;  // input prefixes, in order
};

void run_merge(const MergeArgs& a) {
  const std::string& out = a.out;
  const std::vector<std::string>& inputs = a.inputs;
  std::vector<std::unique_ptr<data::IndexedDataset>> parts;
  for (const auto& p : inputs) parts.push_back(std::make_unique<data::IndexedDataset>(p));
  for (const auto& p : parts)
    if (p->dtype() != parts[0]->dtype())
      fail("cannot merge {} (dtype {}) with {} (dtype {}): the dtypes differ, expected the same dtype\n"
           "hint: preprocess all parts with the same tokenizer (and the same --need-pad-id)",
           p->prefix(), data::dtype_name(p->dtype()), parts[0]->prefix(), data::dtype_name(parts[0]->dtype()));
  data::IndexedDatasetWriter w(out, parts[0]->dtype());
  for (const auto& p : parts) w.append(*p);
  w.finish();
  std::fprintf(stderr, "merged %zu datasets into %s.bin/.idx: %s, %lld sequences, %lld documents, %lld tokens\n",
               parts.size(), out.c_str(), data::dtype_name(w.dtype()), static_cast<long long>(w.num_sequences()),
               static_cast<long long>(w.num_documents()), static_cast<long long>(w.num_tokens()));
}

}  // namespace

void register_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "Inspect and merge Megatron indexed datasets (.bin/.idx)");
  cmd->require_subcommand(1);

  auto [inspect, ia] = add_command<InspectArgs>(
      *cmd, "inspect", "Header, counts, dtype, consistency checks, token stats, first documents",
      "PREFIX names PREFIX.bin and PREFIX.idx without the extension.\n\n"
      "Examples:\n"
      "  llamatrain data inspect data/book_text_document                 # header, checks, first 3 documents as ids\n"
      "  llamatrain data inspect data/book_text_document --docs 5 --tokenizer-model llama2/tokenizer.model\n"
      "                                                                  # decoded text, and ids checked against the "
      "vocab\n",
      run_inspect);
  inspect->add_option("prefix", ia->prefix, "dataset prefix (without .bin/.idx)")->required();
  inspect->add_option("--docs", ia->docs, "number of documents to show")->check(integer_in(0));
  inspect->add_option("--tokenizer-model", ia->tokenizer_model, "decode the documents with this tokenizer.model");
  inspect->add_option("--max-tokens", ia->max_tokens_shown, "ids shown per document without a tokenizer")
      ->check(integer_in(0));

  auto [merge, ma] = add_command<MergeArgs>(
      *cmd, "merge", "Concatenate datasets (same dtype) into one, like Megatron's merge_datasets.py",
      "Sequences and documents keep their order: all of IN_PREFIX 1, then 2, ...; pointers are rebased and\n"
      "document indices offset. The output is written as OUT_PREFIX.{bin,idx}.tmp-XXXXXX and renamed when\n"
      "complete; an error or Ctrl-C removes the temporaries.\n\n"
      "Examples:\n"
      "  llamatrain data merge data/all_text_document data/part0_text_document data/part1_text_document\n",
      run_merge);
  merge->add_option("out_prefix", ma->out, "output prefix")->required();
  merge->add_option("in_prefixes", ma->inputs, "input prefixes, in order")->required();

  register_data_samples(*cmd);
}

}  // namespace llamatrain::cli
