// Blending and the top-level dataset builder; see blend.h.
#include "data/blend.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace llamatrain::data {

namespace fs = std::filesystem;

double numpy_sum(const double* a, int64_t n) {
  // numpy's pairwise_sum: < 8 items left to right from 0; <= 128 with 8 accumulators; else halves.
  if (n < 8) {
    double r = 0.0;
    for (int64_t i = 0; i < n; i++) r += a[i];
    return r;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; j++) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; j++) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_sum(a, n2) + numpy_sum(a + n2, n - n2);
}

std::vector<double> normalize_weights(const std::vector<double>& w) {
  double sum = 0.0 + numpy_sum(w.data(), int64_t(w.size()));  // reduce starts from the identity 0
  if (!(sum > 0.0))
    fail("blend weights sum to {}, expected > 0\nhint: data_prefix is [w1, prefix1, w2, prefix2, ...]", sum);
  std::vector<double> out(w.size());
  for (size_t i = 0; i < w.size(); i++) {
    if (!(w[i] >= 0.0)) fail("blend weight {} of data_prefix is {}, expected >= 0", i, w[i]);
    out[i] = w[i] / sum;
  }
  return out;
}

std::vector<int64_t> samples_per_dataset(const std::vector<double>& nw, int64_t n, double surplus) {
  std::vector<int64_t> out(nw.size());
  for (size_t k = 0; k < nw.size(); k++) out[k] = int64_t(std::ceil(std::ceil(double(n) * nw[k]) * (1.0 + surplus)));
  return out;
}

namespace {

// a*b rounded to double before its use. Without this, -march=native lets the compiler fuse
// w*x - count into an FMA, which breaks exact ties differently from Megatron's helpers.cpp (built
// without FMA on x86-64) and from numpy: weights {0.5, 0.3, 0.2} tie at sample 10.
double mul_rounded(double a, double b) {
  volatile double p = a * b;
  return p;
}

}  // namespace

void build_blending_indices(int16_t* dataset_index, int64_t* dataset_sample_index, const std::vector<double>& weights,
                            int64_t size) {
  const size_t nd = weights.size();
  CHECK(nd >= 1 && nd < 32767, "blending {} datasets", nd);
  std::vector<int64_t> count(nd, 0);
  for (int64_t i = 0; i < size; i++) {
    // Error of each dataset: how far its share lags its weight after max(i, 1) samples.
    double x = std::max(double(i), 1.0);
    size_t best = 0;
    double best_err = mul_rounded(weights[0], x) - double(count[0]);
    for (size_t k = 1; k < nd; k++) {
      double err = mul_rounded(weights[k], x) - double(count[k]);
      if (err > best_err) {  // strict: ties keep the lower index
        best_err = err;
        best = k;
      }
    }
    dataset_index[i] = int16_t(best);
    dataset_sample_index[i] = count[best];
    count[best]++;
  }
}

namespace {

// Megatron's build_exhaustive_blending_indices: every dataset k contributes exactly sizes[k]
// samples, interleaved in proportion to the sizes.
void build_exhaustive_blending_indices(std::vector<int16_t>* di, std::vector<int64_t>* dsi,
                                       const std::vector<int64_t>& sizes) {
  const size_t nd = sizes.size();
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<double> w(nd);
  for (size_t k = 0; k < nd; k++) w[k] = double(sizes[k]) / double(total);
  std::vector<int64_t> count(nd, 0);
  std::vector<bool> unspent(nd);
  size_t n_unspent = 0;
  for (size_t k = 0; k < nd; k++) n_unspent += (unspent[k] = sizes[k] > 0);
  di->clear();
  dsi->clear();
  for (int64_t i = 0; n_unspent > 0; i++) {
    double x = std::max(double(i), 1.0);
    int64_t best = -1;
    double best_err = std::numeric_limits<double>::lowest();
    for (size_t k = 0; k < nd; k++) {
      if (!unspent[k]) continue;
      double err = mul_rounded(w[k], x) - double(count[k]);
      if (err > best_err) best_err = err, best = int64_t(k);
    }
    di->push_back(int16_t(best));
    dsi->push_back(count[size_t(best)]);
    if (++count[size_t(best)] == sizes[size_t(best)]) unspent[size_t(best)] = false, n_unspent--;
  }
}

}  // namespace

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)), size_(size) {
  CHECK(!datasets_.empty() && datasets_.size() == weights.size() && datasets_.size() < 32767,
        "blend of {} datasets with {} weights", datasets_.size(), weights.size());
  for (const auto& d : datasets_)
    if (d->text_length() != datasets_[0]->text_length())
      fail("blended datasets have sample lengths {} and {}, expected equal", d->text_length(),
           datasets_[0]->text_length());
  if (size_ < 0) {  // exhaustive: every sample of every dataset once
    std::vector<int64_t> sizes;
    for (const auto& d : datasets_) sizes.push_back(d->size());
    weights_ = std::move(weights);
    build_exhaustive_blending_indices(&dataset_index_, &dataset_sample_index_, sizes);
    size_ = int64_t(dataset_index_.size());
    return;
  }
  weights_ = normalize_weights(weights);  // Megatron normalizes a second time, bit for bit
  dataset_index_.resize(size_t(size_));
  dataset_sample_index_.resize(size_t(size_));
  build_blending_indices(dataset_index_.data(), dataset_sample_index_.data(), weights_, size_);
  std::vector<int64_t> used(datasets_.size(), 0);
  for (int64_t i = 0; i < size_; i++) used[size_t(dataset_index_[size_t(i)])] = dataset_sample_index_[size_t(i)] + 1;
  for (size_t k = 0; k < datasets_.size(); k++)
    if (used[k] > datasets_[k]->size())
      fail("blend draws {} samples from dataset {}, which has {}\nhint: raise the blend surplus", used[k], k,
           datasets_[k]->size());
}

int64_t BlendedDataset::sample_text(int64_t i, int32_t* text) const {
  CHECK(i >= 0 && i < size_, "blended sample {} of {}", i, size_);
  return datasets_[size_t(dataset_index_[size_t(i)])]->sample_text(dataset_sample_index_[size_t(i)], text);
}

int BlendedDataset::source_of(int64_t i) const {
  CHECK(i >= 0 && i < size_, "blended sample {} of {}", i, size_);
  return dataset_index_[size_t(i)];
}

namespace {

// "NAME:PREFIX" -> {NAME, PREFIX}; anything else -> {"", item}.
std::pair<std::string, std::string> split_source_name(const std::string& item) {
  const size_t colon = item.find(':');
  if (colon == std::string::npos || colon == 0) return {"", item};
  for (size_t i = 0; i < colon; i++) {
    const char c = item[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-'))
      return {"", item};
  }
  if (colon + 1 == item.size())
    fail("data_prefix entry \"{}\" names a source but gives no prefix, expected NAME:PREFIX\nhint: e.g. "
         "zh:/data/zh_text_document",
         item);
  return {item.substr(0, colon), item.substr(colon + 1)};
}

// Fills spec.names from spec.prefixes' "NAME:" parts (which it strips); names must differ.
void take_source_names(BlendSpec& spec) {
  for (std::string& p : spec.prefixes) {
    auto [name, prefix] = split_source_name(p);
    for (const std::string& seen : spec.names)
      if (!name.empty() && seen == name)
        fail("data_prefix names two sources \"{}\", expected a name per source\nhint: rename one of them", name);
    spec.names.push_back(name);
    p = prefix;
  }
}

}  // namespace

BlendSpec parse_data_prefix(const std::vector<std::string>& items) {
  if (items.empty()) fail("data_prefix is empty\nhint: data_prefix: [1.0, /path/to/corpus_text_document]");
  auto as_number = [](const std::string& s, double* v) {
    char* end = nullptr;
    *v = std::strtod(s.c_str(), &end);
    return !s.empty() && end == s.c_str() + s.size();
  };
  BlendSpec spec;
  bool weighted = items.size() % 2 == 0;
  for (size_t i = 0; weighted && i < items.size(); i += 2) {
    double w;
    weighted = as_number(items[i], &w);
  }
  if (!weighted) {
    for (const auto& s : items) {
      double w;
      if (as_number(s, &w))
        fail("data_prefix entry \"{}\" is a number but the list is not [weight, prefix, ...] pairs\n"
             "hint: data_prefix: [0.7, /data/a_text_document, 0.3, /data/b_text_document]",
             s);
      spec.prefixes.push_back(s);
    }
    take_source_names(spec);
    return spec;
  }
  for (size_t i = 0; i < items.size(); i += 2) {
    double w;
    as_number(items[i], &w);
    if (!(std::isfinite(w) && w >= 0.0))
      fail("data_prefix weight \"{}\" of {} is not a number >= 0\nhint: data_prefix: [0.7, /data/a_text_document, 0.3, "
           "/data/b_text_document]",
           items[i], items[i + 1]);
    spec.weights.push_back(w);
    spec.prefixes.push_back(items[i + 1]);
  }
  normalize_weights(spec.weights);  // their sum must be > 0: checked with the config, not at the first sample
  take_source_names(spec);
  return spec;
}

std::shared_ptr<const SampleDataset> build_gpt_split(const GptDataConfig& cfg, const BlendSpec& spec,
                                                     const std::vector<std::shared_ptr<const TokenSource>>& sources,
                                                     Split split, int64_t n) {
  CHECK(sources.size() == spec.prefixes.size() && !sources.empty(), "{} sources for {} prefixes", sources.size(),
        spec.prefixes.size());
  const int k = int(split);
  if (!split_ranges(cfg.splits_string, 1)[size_t(k)].exists) return nullptr;  // weight 0

  // One split of one source with m samples requested (-1 = one epoch).
  auto make = [&](size_t src, int64_t m) -> std::shared_ptr<const SampleDataset> {
    auto ranges = split_ranges(cfg.splits_string, sources[src]->num_sequences());
    GptIndexParams p;
    p.seq_length = cfg.seq_length;
    p.num_samples = m;
    p.seed = cfg.seed;
    p.drop_last_partial = (split == Split::train) || cfg.drop_last_partial_validation;
    auto ds = std::make_shared<const GptDataset>(sources[src], split, ranges[size_t(k)], p, cfg.cache);
    return std::make_shared<const GptSplitDataset>(ds);
  };

  if (spec.weights.empty() && sources.size() == 1) return make(0, n);
  std::vector<std::shared_ptr<const SampleDataset>> parts;
  if (!spec.weights.empty()) {
    // Each source sized ceil(ceil(N*w)*(1+surplus)); the blend takes sum_k ceil(N*w_k) samples.
    if (n < 0) fail("{} split: blend weights need a requested sample count", split_name(split));
    std::vector<double> nw = normalize_weights(spec.weights);
    auto target = samples_per_dataset(nw, n, 0.0);
    auto buffer = samples_per_dataset(nw, n, cfg.surplus);
    int64_t size = 0;
    for (size_t s = 0; s < sources.size(); s++) {
      parts.push_back(make(s, buffer[s]));
      size += target[s];
    }
    return std::make_shared<const BlendedDataset>(parts, nw, size);
  }
  // Several prefixes without weights: one epoch each, weighted by length.
  std::vector<double> lens;
  int64_t total = 0;
  for (size_t s = 0; s < sources.size(); s++) {
    parts.push_back(make(s, -1));
    lens.push_back(double(parts.back()->size()));
    total += parts.back()->size();
  }
  return std::make_shared<const BlendedDataset>(parts, lens, n < 0 ? -1 : std::min(n, total));
}

const std::vector<std::string>& split_data_prefix(const GptDataConfig& cfg, Split split) {
  if (!cfg.per_split || split == Split::train) return cfg.data_prefix;
  return split == Split::valid ? cfg.validation_prefix : cfg.test_prefix;
}

std::vector<std::string> source_names(const std::vector<std::string>& prefixes) {
  // Each prefix's path components, last first, with or without preprocess's ending on the file name.
  auto components = [](const std::string& path, bool strip) {
    std::vector<std::string> c;
    for (const auto& part : fs::path(path).lexically_normal())
      if (!part.empty() && part != "/") c.push_back(part.string());
    std::reverse(c.begin(), c.end());
    if (c.empty()) c.push_back(path);
    for (const std::string_view end : {"_text_document", "_document"}) {
      if (!strip || !c[0].ends_with(end)) continue;
      if (c[0].size() > end.size()) c[0].resize(c[0].size() - end.size());
      break;
    }
    return c;
  };
  const size_t n = prefixes.size();
  std::vector<std::string> path(n);
  std::vector<std::vector<std::string>> parts(n);
  for (size_t i = 0; i < n; i++) {
    path[i] = fs::path(prefixes[i]).lexically_normal().string();
    parts[i] = components(prefixes[i], true);
  }
  // Two files that differ only in their ending ("x_document", "x_text_document") keep it.
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++)
      if (path[j] != path[i] && components(prefixes[j], true) == components(prefixes[i], true))
        parts[i] = components(prefixes[i], false);
  auto name = [&](size_t i, size_t depth) {
    std::string s;
    for (size_t d = std::min(depth, parts[i].size()); d-- > 0;) s += (s.empty() ? "" : "/") + parts[i][d];
    return s;
  };
  std::vector<std::string> out(n);
  for (size_t i = 0; i < n; i++) {
    // The fewest trailing components that no other file shares.
    size_t depth = 1;
    for (size_t j = 0; j < n; j++) {
      if (path[j] == path[i]) continue;
      while (depth < parts[i].size() && name(i, depth) == name(j, depth)) depth++;
    }
    out[i] = name(i, depth);
    for (size_t j = 0; j < n; j++)  // "x" and "/x": only the whole path tells them apart
      if (path[j] != path[i] && name(j, parts[j].size()) == out[i]) out[i] = path[i];
    int seen = 1;  // the same file given again (up-weighted by repeating it)
    for (size_t j = 0; j < i; j++) seen += path[j] == path[i];
    if (seen > 1) out[i] += fmt::format("#{}", seen);
  }
  return out;
}

std::vector<std::string> source_names(const BlendSpec& spec) {
  std::vector<std::string> out = source_names(spec.prefixes);
  auto given = [&](const std::string& name) {
    return std::find(spec.names.begin(), spec.names.end(), name) != spec.names.end();
  };
  for (size_t i = 0; i < out.size(); i++) {
    if (i < spec.names.size() && !spec.names[i].empty())
      out[i] = spec.names[i];
    else if (given(out[i]))
      out[i] = fs::path(spec.prefixes[i]).lexically_normal().string();
  }
  return out;
}

std::array<std::shared_ptr<const SampleDataset>, 3> build_gpt_datasets(const GptDataConfig& cfg,
                                                                       std::array<int64_t, 3> num_samples,
                                                                       const SourceOpener& open) {
  std::array<std::shared_ptr<const SampleDataset>, 3> out;
  if (!cfg.per_split) {
    BlendSpec spec = parse_data_prefix(cfg.data_prefix);
    std::vector<std::shared_ptr<const TokenSource>> sources;
    for (const auto& p : spec.prefixes) sources.push_back(open(p));
    for (int k = 0; k < 3; k++) out[size_t(k)] = build_gpt_split(cfg, spec, sources, Split(k), num_samples[size_t(k)]);
    return out;
  }
  // Each split from its own prefixes, every file whole: a splits_string that gives it everything.
  for (int k = 0; k < 3; k++) {
    const std::vector<std::string>& items = split_data_prefix(cfg, Split(k));
    if (items.empty()) continue;
    GptDataConfig whole = cfg;
    whole.splits_string = k == 0 ? "1,0,0" : k == 1 ? "0,1,0" : "0,0,1";
    BlendSpec spec = parse_data_prefix(items);
    std::vector<std::shared_ptr<const TokenSource>> sources;
    for (const auto& p : spec.prefixes) sources.push_back(open(p));
    out[size_t(k)] = build_gpt_split(whole, spec, sources, Split(k), num_samples[size_t(k)]);
  }
  return out;
}

}  // namespace llamatrain::data
