// Mutation fuzzer for the io parsers: .safetensors files, model.safetensors.index.json and HF
// config.json. Seeds are valid inputs built in memory; each iteration mutates one (byte flips,
// inserts, deletions, truncations, header-aware JSON edits, length-field edits), writes it to a temp
// file and opens it. Only llamatrain::Error may come out; any other exception is a failure and a
// crash or sanitizer report fails the run. Accepted inputs must also survive a write/read round trip.
// Usage: safetensors_fuzz --seconds S [--seed N]
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace {

using namespace llamatrain;
using namespace llamatrain::io;
using nlohmann::json;
namespace fs = std::filesystem;

std::mt19937_64 rng;
uint64_t rnd(uint64_t n) { return n ? rng() % n : 0; }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(v >> (8 * i)));
  return s;
}

std::string to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// ---- seeds ----

std::vector<std::string> safetensors_seeds() {
  std::vector<std::string> seeds;
  float f[24];
  for (int i = 0; i < 24; ++i) f[i] = float(i) * 0.5f - 3.0f;
  uint16_t h[8] = {0x3c00, 0x0001, 0x7c00, 0xfe00, 0x8000, 0x03ff, 0x7bff, 0xc000};
  int64_t q[3] = {-1, 0, 1};
  seeds.push_back(to_string(serialize_safetensors({}, {})));
  seeds.push_back(to_string(serialize_safetensors({{"attn.0", DType::F32, {1, 2, 3}, f}}, {})));
  seeds.push_back(to_string(serialize_safetensors({{"model.embed_tokens.weight", DType::BF16, {2, 4}, h},
                                                   {"model.norm.weight", DType::F16, {8}, h},
                                                   {"lm_head.weight", DType::F32, {4, 4}, f},
                                                   {"scalar", DType::F32, {}, f},
                                                   {"empty", DType::F16, {0, 3}, h},
                                                   {"ids", DType::I64, {3}, q},
                                                   {"mask", DType::BOOL, {2}, "\1\0"},
                                                   {"u", DType::U8, {5}, "abcde"}},
                                                  {{"format", "pt"}})));
  seeds.push_back(to_string(serialize_safetensors({{"a", DType::U16, {2}, h},
                                                   {"b", DType::U32, {1}, h},
                                                   {"c", DType::U64, {1}, h},
                                                   {"d", DType::F64, {1}, f},
                                                   {"e", DType::I32, {2}, f},
                                                   {"f", DType::I16, {2}, h},
                                                   {"g", DType::I8, {3}, h}},
                                                  {{"format", "pt"}, {"k", "v"}})));
  // Legacy: unpadded header, keys out of order.
  const std::string legacy =
      R"({"b":{"shape":[2],"data_offsets":[3,7],"dtype":"BF16"},"a":{"data_offsets":[0,3],"dtype":"U8","shape":[3]}})";
  seeds.push_back(le64(legacy.size()) + legacy + std::string("xyz\x80\x3f\x00\xc0", 7));
  return seeds;
}

const char* kConfig = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 176, "max_position_embeddings": 256,
  "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "torch_dtype": "float16", "use_cache": true, "vocab_size": 256
})";

// ---- mutations ----

const char* kTokens[] = {"{",
                         "}",
                         "[",
                         "]",
                         ",",
                         ":",
                         "\"",
                         "\\",
                         "-",
                         "0",
                         "1",
                         " ",
                         "null",
                         "true",
                         "\"F32\"",
                         "\"BF16\"",
                         "\"F8_E4M3\"",
                         "\"dtype\"",
                         "\"shape\"",
                         "\"data_offsets\"",
                         "\"__metadata__\"",
                         "[0,0]",
                         "[]",
                         "{}",
                         "1e400",
                         "-1",
                         "18446744073709551615",
                         "18446744073709551616",
                         "9223372036854775808",
                         "4294967296",
                         "1.5",
                         "\xff",
                         "\xc3\xa9",
                         "\\u0000",
                         "\\ud800"};

std::string interesting_number() {
  static const char* nums[] = {"0",
                               "1",
                               "2",
                               "3",
                               "4",
                               "8",
                               "24",
                               "-1",
                               "-0",
                               "1.0",
                               "1e3",
                               "1e400",
                               "65536",
                               "4294967295",
                               "4294967296",
                               "9223372036854775807",
                               "9223372036854775808",
                               "18446744073709551615",
                               "18446744073709551616",
                               "100000000",
                               "100000001"};
  if (rnd(3) == 0) return std::to_string(rng() >> rnd(64));
  return nums[rnd(sizeof(nums) / sizeof(nums[0]))];
}

void byte_mutation(std::string& s) {
  switch (rnd(8)) {
    case 0:  // flip a bit
      if (!s.empty()) s[rnd(s.size())] ^= char(1u << rnd(8));
      break;
    case 1:  // set a byte
      if (!s.empty()) s[rnd(s.size())] = char(rnd(256));
      break;
    case 2:  // insert a token
      s.insert(rnd(s.size() + 1), kTokens[rnd(sizeof(kTokens) / sizeof(kTokens[0]))]);
      break;
    case 3: {  // delete a range
      if (s.empty()) break;
      size_t at = rnd(s.size());
      s.erase(at, 1 + rnd(std::min<size_t>(16, s.size() - at)));
      break;
    }
    case 4:  // truncate
      s.resize(rnd(s.size() + 1));
      break;
    case 5:  // append
      for (uint64_t i = 0, n = 1 + rnd(16); i < n; ++i) s.push_back(char(rnd(256)));
      break;
    case 6: {  // duplicate a range
      if (s.empty()) break;
      size_t at = rnd(s.size()), len = 1 + rnd(std::min<size_t>(64, s.size() - at));
      s.insert(rnd(s.size() + 1), s.substr(at, len));
      break;
    }
    default: {  // replace a run of digits by another number
      size_t at = s.find_first_of("0123456789", rnd(s.size() + 1));
      if (at == std::string::npos) break;
      size_t end = s.find_first_not_of("0123456789", at);
      s.replace(at, (end == std::string::npos ? s.size() : end) - at, interesting_number());
      break;
    }
  }
}

json random_value() {
  switch (rnd(10)) {
    case 0: return nullptr;
    case 1: return bool(rnd(2));
    case 2: return int64_t(rng()) >> rnd(64);
    case 3: return rng() >> rnd(64);
    case 4: return double(int64_t(rng())) / double(1 + rnd(1000000));
    case 5: return "silu";
    case 6: return json::array({rnd(5), "x"});
    case 7: return {{"rope_type", rnd(2) ? "default" : "linear"}, {"rope_theta", double(rnd(1000000))}};
    case 8: return int64_t(rnd(300)) - 20;
    default: return std::string(1 + rnd(4), char('a' + rnd(26)));
  }
}

// Edits the JSON header text and, usually, fixes the length field to match.
void header_mutation(std::string& file) {
  if (file.size() < 8) return byte_mutation(file);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(file[size_t(i)]);
  if (n > file.size() - 8) return byte_mutation(file);
  std::string header = file.substr(8, n), data = file.substr(8 + n);
  if (rnd(2) == 0) {
    // Structured: parse, change one thing, dump.
    try {
      json j = json::parse(header);
      if (j.is_object() && !j.empty()) {
        auto it = j.begin();
        std::advance(it, long(rnd(j.size())));
        json& e = *it;
        static const char* fields[] = {"dtype", "shape", "data_offsets", "extra"};
        switch (rnd(10)) {
          case 7:
            if (e.is_object()) e[fields[rnd(4)]] = random_value();
            break;
          case 8:
            if (e.is_object() && e["shape"].is_array() && !e["shape"].empty())
              e["shape"][rnd(e["shape"].size())] = random_value();
            break;
          case 9:
            if (e.is_object() && e["data_offsets"].is_array() && !e["data_offsets"].empty())
              e["data_offsets"][rnd(e["data_offsets"].size())] = rnd(2) ? random_value() : json(rnd(128));
            break;
          case 0: j[it.key() + "x"] = e; break;  // a copy under another name
          case 1:
            if (e.is_object()) e["dtype"] = kTokens[14 + rnd(3)];
            break;
          case 2:
            if (e.is_object()) e["shape"].push_back(rnd(4));
            break;
          case 3:
            if (e.is_object()) e["data_offsets"] = {rnd(64), rnd(64)};
            break;
          case 4:
            if (e.is_object() && !e.empty()) e.erase(e.begin());
            break;
          case 5: e = json::parse(std::string("[") + interesting_number() + "]", nullptr, false); break;
          default: j.erase(it); break;
        }
      }
      header = j.dump();
    } catch (const json::exception&) {
    }
  } else {
    for (uint64_t i = 0, k = 1 + rnd(3); i < k; ++i) byte_mutation(header);
  }
  if (rnd(4) == 0) data.resize(rnd(data.size() + 9), 'x');
  uint64_t new_n = rnd(5) ? header.size() : n;
  file = le64(new_n) + header + data;
}

void length_mutation(std::string& file) {
  if (file.size() < 8) return byte_mutation(file);
  static const uint64_t vals[] = {
      0, 1, 2, 7, 8, 100000000, 100000001, uint64_t(1) << 63, ~uint64_t(0), uint64_t(1) << 32};
  uint64_t v = rnd(2) ? vals[rnd(sizeof(vals) / sizeof(vals[0]))] : rnd(file.size() + 16);
  file.replace(0, 8, le64(v));
}

// ---- targets ----

struct Stats {
  uint64_t runs = 0, accepted = 0, rejected = 0;
};
std::map<std::string, Stats> stats;
uint64_t failures = 0;

void report_failure(const char* target, const std::string& input, const char* what) {
  ++failures;
  std::string path = fmt::format("safetensors_fuzz_failure_{}.bin", failures);
  write_bytes(path, input);
  std::fprintf(stderr, "FAILURE (%s): unexpected exception: %s; input saved to %s\n", target, what, path.c_str());
}

// Opens a file and, when it is accepted, reads every tensor and checks a write/read round trip.
void check_safetensors_file(const std::string& path) {
  SafetensorsFile f(path);
  std::vector<TensorToWrite> again;
  volatile uint8_t sink = 0;
  for (const TensorView& t : f.tensors()) {
    for (size_t i = 0; i < t.nbytes; ++i) sink = uint8_t(sink + t.data[i]);  // ASan checks the bounds
    if (int64_t(t.nbytes) != t.numel() * dtype_size(t.dtype)) throw std::logic_error("nbytes != numel * size");
    again.push_back({t.name, t.dtype, t.shape, t.data});
  }
  SafetensorsCheckpoint ck(path);
  for (const TensorView& t : f.tensors()) {
    if (t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16) {
      std::vector<float> out(size_t(t.numel()));
      ck.read_f32(t.name, t.shape, out.data());
    }
  }
  std::string copy = path + ".again";
  write_bytes(copy, to_string(serialize_safetensors(again, f.metadata())));  // same bytes, no fsync
  SafetensorsFile g(copy);
  if (g.tensors().size() != f.tensors().size() || g.metadata() != f.metadata())
    throw std::logic_error("round trip changed the tensor set");
  for (const TensorView& t : f.tensors()) {
    const TensorView* u = g.find(t.name);
    if (!u || u->shape != t.shape || u->dtype != t.dtype || u->nbytes != t.nbytes ||
        (t.nbytes && std::memcmp(u->data, t.data, t.nbytes) != 0))
      throw std::logic_error("round trip changed tensor " + t.name);
  }
}

template <typename Fn>
void run_one(const char* target, const std::string& input, Fn&& fn) {
  Stats& s = stats[target];
  ++s.runs;
  try {
    fn();
    ++s.accepted;
  } catch (const Error&) {
    ++s.rejected;
  } catch (const std::exception& e) {
    report_failure(target, input, e.what());
  } catch (...) {
    report_failure(target, input, "non-std exception");
  }
}

void mutate_config(std::string& text) {
  json j = json::parse(kConfig);
  static const char* extra[] = {"head_dim",       "rope_parameters", "rope_scaling", "attention_bias", "mlp_bias",
                                "sliding_window", "dtype",           "model_type",   "hidden_act"};
  for (uint64_t i = 0, k = 1 + rnd(3); i < k; ++i) {
    if (rnd(3) == 0) {
      j[extra[rnd(sizeof(extra) / sizeof(extra[0]))]] = random_value();
    } else {
      auto it = j.begin();
      std::advance(it, long(rnd(j.size())));
      if (rnd(4) == 0)
        j.erase(it);
      else
        *it = random_value();
    }
  }
  text = j.dump(int(rnd(3)) - 1);
  if (rnd(3) == 0)
    for (uint64_t i = 0, k = 1 + rnd(3); i < k; ++i) byte_mutation(text);
}

void check_config(const std::string& path, const std::string& dir) {
  model::LlamaConfig c = read_hf_config(path);
  // An accepted config must survive a write/read round trip unchanged.
  std::string out = dir + "/roundtrip.json";
  write_hf_config(out, c, "bfloat16");
  model::LlamaConfig d = read_hf_config(out);
  if (c.dim != d.dim || c.ffn_dim != d.ffn_dim || c.n_layers != d.n_layers || c.n_heads != d.n_heads ||
      c.n_kv_heads != d.n_kv_heads || c.vocab_size != d.vocab_size || c.max_seq_len != d.max_seq_len ||
      c.norm_eps != d.norm_eps || c.rope_theta != d.rope_theta || c.tie_embeddings != d.tie_embeddings ||
      c.bos_id != d.bos_id || c.eos_id != d.eos_id)
    throw std::logic_error("config round trip changed a value");
  (void)c.num_params();
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s --seconds S [--seed N]\n", argv[0]);
      return 2;
    }
  }
  rng.seed(seed);
  // tmpfs when there is one: on ext4 with discard, truncating files dominates the run time.
  std::error_code ec;
  const fs::path tmp_root = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  std::string tmpl = (tmp_root / "safetensors_fuzz_XXXXXX").string();
  if (!mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    return 2;
  }
  const std::string dir = tmpl;
  std::printf("safetensors_fuzz: seed %llu, %.0f s, inputs under %s\n", (unsigned long long)seed, seconds, dir.c_str());
  std::fflush(stdout);

  const std::vector<std::string> seeds = safetensors_seeds();
  for (const std::string& s : seeds) {  // every seed must open
    write_bytes(dir + "/seed.safetensors", s);
    check_safetensors_file(dir + "/seed.safetensors");
  }
  // A sharded checkpoint whose index gets mutated.
  const std::string ck = dir + "/ck";
  float w[16] = {};
  write_safetensors_sharded(ck, {{"a", DType::F32, {4}, w}, {"b", DType::F32, {4}, w}, {"c", DType::F16, {8}, w}}, 16);
  std::string index_seed;
  {
    std::ifstream in(ck + "/model.safetensors.index.json");
    index_seed.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string file = dir + "/x.safetensors", cfg = dir + "/config.json";

  const auto start = std::chrono::steady_clock::now();
  uint64_t iter = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    ++iter;
    const uint64_t target = rnd(10);
    if (target < 6) {
      std::string input = seeds[rnd(seeds.size())];
      for (uint64_t i = 0, k = 1 + rnd(4); i < k; ++i) {
        const uint64_t m = rnd(10);
        if (m < 5)
          header_mutation(input);
        else if (m < 9)
          byte_mutation(input);
        else
          length_mutation(input);
      }
      write_bytes(file, input);
      run_one("safetensors", input, [&] { check_safetensors_file(file); });
    } else if (target < 7) {
      std::string input = index_seed;
      for (uint64_t i = 0, k = 1 + rnd(3); i < k; ++i) byte_mutation(input);
      write_bytes(ck + "/model.safetensors.index.json", input);
      run_one("index", input, [&] {
        SafetensorsCheckpoint c(ck);
        for (const std::string& n : c.names()) (void)c.get(n);
      });
    } else {
      std::string input;
      mutate_config(input);
      write_bytes(cfg, input);
      run_one("config", input, [&] { check_config(cfg, dir); });
    }
  }
  for (const auto& [name, s] : stats)
    std::printf("  %-12s runs %llu  accepted %llu  rejected with Error %llu\n", name.c_str(),
                (unsigned long long)s.runs, (unsigned long long)s.accepted, (unsigned long long)s.rejected);
  std::printf("safetensors_fuzz: %llu iterations in %.0f s, %llu failures\n", (unsigned long long)iter, seconds,
              (unsigned long long)failures);
  fs::remove_all(dir);
  return failures ? 1 : 0;
}
