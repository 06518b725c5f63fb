// safetensors reader and writer (docs/formats.md section 3). The reader mmaps a file and validates the
// whole header before exposing any pointer: header length, JSON syntax, duplicate keys, dtypes,
// shapes (overflow-checked), contiguous offsets and the exact file size; any violation throws
// Error naming the file, the tensor, the value seen and the value expected. The writer follows the
// reference crate byte for byte and commits each file atomically (core/file.h).
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/bf16.h"
#include "core/f16.h"
#include "core/error.h"
#include "core/file.h"
#include "io/torch_checkpoint.h"

namespace llamatrain::io {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kHint = "hint: the file is truncated or corrupt; re-download or re-export it";
constexpr uint64_t kMaxHeader = 100'000'000;
constexpr int kMaxJsonDepth = 16;

struct DTypeInfo {
  const char* name;
  int size;
  int rank;  // position in the reference crate's enum (docs/formats.md 3.1), used for the write order
};
// Indexed by DType's value (enum order in safetensors.h).
constexpr DTypeInfo kDTypes[] = {{"F64", 8, 19}, {"F32", 4, 17}, {"F16", 2, 13}, {"BF16", 2, 14}, {"I64", 8, 20},
                                 {"I32", 4, 15}, {"I16", 2, 11}, {"I8", 1, 5},   {"U8", 1, 4},    {"BOOL", 1, 0},
                                 {"U16", 2, 12}, {"U32", 4, 16}, {"U64", 8, 21}};
constexpr int kNumDTypes = int(sizeof(kDTypes) / sizeof(kDTypes[0]));
// Valid in the format but not readable here.
constexpr const char* kOtherDTypes[] = {"F4",      "F6_E2M3",     "F6_E3M2",     "F8_E5M2", "F8_E4M3",
                                        "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"};

std::string known_dtype_list() {
  std::string s;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (i) s += ", ";
    s += kDTypes[i].name;
  }
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// A short, printable rendering of a JSON value for error messages.
std::string preview(const json& v) {
  std::string s;
  try {
    s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  } catch (const json::exception&) {
    s = "<unprintable>";
  }
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Printable rendering of a (possibly hostile) name: JSON-escaped, shortened.
std::string quoted(const std::string& name) {
  std::string s = json(name).dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 120) s = s.substr(0, 117) + "...\"";
  return s;
}

// Parses JSON text, rejecting duplicate keys at any level and nesting deeper than kMaxJsonDepth
// (nlohmann keeps the last duplicate silently). Throws Error prefixed with `what`.
json parse_json_strict(const char* begin, const char* end, const std::string& what) {
  // nlohmann stops at a NUL as if the input ended there; JSON text never contains one.
  if (const void* nul = std::memchr(begin, 0, size_t(end - begin)))
    fail("{}: has a NUL byte at offset {}, expected UTF-8 JSON text\n{}", what, static_cast<const char*>(nul) - begin,
         kHint);
  std::vector<std::set<std::string>> keys;  // keys seen so far, per open object
  int depth = 0;
  auto callback = [&](int, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start: keys.emplace_back(); [[fallthrough]];
      case json::parse_event_t::array_start:
        if (++depth > kMaxJsonDepth)
          fail("{}: JSON nests {} levels deep, expected at most {}\n{}", what, depth, kMaxJsonDepth, kHint);
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        [[fallthrough]];
      case json::parse_event_t::array_end: --depth; break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.empty() && !keys.back().insert(k).second)
          fail("{}: duplicate key {} in the JSON, expected each key once\n{}", what, quoted(k), kHint);
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({}), expected a UTF-8 JSON object\n{}", what, e.what(), kHint);
  }
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void put_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}

// One header entry, before pointers into the file are made.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end, nbytes;
};

uint64_t get_offset(const json& v, const std::string& file, const std::string& name, int which) {
  if (!v.is_number_unsigned())
    fail("{}: tensor {} data_offsets[{}] is {}, expected a non-negative integer\n{}", file, quoted(name), which,
         preview(v), kHint);
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& file, const std::string& name, const json& v) {
  Entry e;
  e.name = name;
  if (!v.is_object())
    fail("{}: tensor {} is described by {} (a {}), expected an object with dtype, shape and "
         "data_offsets\n{}",
         file, quoted(name), preview(v), v.type_name(), kHint);
  // dtype
  auto it = v.find("dtype");
  if (it == v.end())
    fail("{}: tensor {} has no \"dtype\", expected one of {}\n{}", file, quoted(name), known_dtype_list(), kHint);
  if (!it->is_string())
    fail("{}: tensor {} dtype is {}, expected a string such as \"F32\"\n{}", file, quoted(name), preview(*it), kHint);
  const std::string& dname = it->get_ref<const std::string&>();
  int d = 0;
  while (d < kNumDTypes && dname != kDTypes[d].name) ++d;
  if (d == kNumDTypes) {
    bool other = std::find_if(std::begin(kOtherDTypes), std::end(kOtherDTypes),
                              [&](const char* o) { return dname == o; }) != std::end(kOtherDTypes);
    if (other)
      fail("{}: tensor {} has dtype {}, which llamatrain cannot read, expected one of {}\n"
           "hint: convert the checkpoint to F32, BF16 or F16",
           file, quoted(name), dname, known_dtype_list());
    fail("{}: tensor {} has unknown dtype {}, expected one of {}\n{}", file, quoted(name), quoted(dname),
         known_dtype_list(), kHint);
  }
  e.dtype = DType(d);
  // shape: non-negative integers whose product (in file order, overflow-checked) is numel
  it = v.find("shape");
  if (it == v.end()) fail("{}: tensor {} has no \"shape\", expected an array of sizes\n{}", file, quoted(name), kHint);
  if (!it->is_array())
    fail("{}: tensor {} shape is {}, expected an array of non-negative integers\n{}", file, quoted(name), preview(*it),
         kHint);
  uint64_t numel = 1;
  for (const json& s : *it) {
    if (!s.is_number_unsigned() || s.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("{}: tensor {} shape entry is {}, expected a non-negative integer below 2^63\n{}", file, quoted(name),
           preview(s), kHint);
    uint64_t n = s.get<uint64_t>();
    if (__builtin_mul_overflow(numel, n, &numel))
      fail("{}: tensor {} shape {} has more than 2^64 elements, expected a realistic size\n{}", file, quoted(name),
           preview(*it), kHint);
    e.shape.push_back(int64_t(n));
  }
  if (__builtin_mul_overflow(numel, uint64_t(kDTypes[d].size), &e.nbytes) ||
      e.nbytes > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("{}: tensor {} shape {} overflows 2^63 bytes, expected a realistic size\n{}", file, quoted(name), preview(*it),
         kHint);
  // data_offsets [begin, end)
  it = v.find("data_offsets");
  if (it == v.end())
    fail("{}: tensor {} has no \"data_offsets\", expected [begin, end]\n{}", file, quoted(name), kHint);
  if (!it->is_array() || it->size() != 2)
    fail("{}: tensor {} data_offsets is {}, expected an array [begin, end]\n{}", file, quoted(name), preview(*it),
         kHint);
  e.begin = get_offset((*it)[0], file, name, 0);
  e.end = get_offset((*it)[1], file, name, 1);
  if (e.end < e.begin)
    fail("{}: tensor {} data_offsets are [{}, {}], expected begin <= end\n{}", file, quoted(name), e.begin, e.end,
         kHint);
  return e;
}

// Validates the whole file image and fills tensors (in offset order) and metadata.
void parse_file(const uint8_t* bytes, size_t size, const std::string& file, std::vector<TensorView>& tensors,
                std::map<std::string, std::string>& metadata) {
  if (size < 8) fail("{}: file is {} bytes, expected at least 8 (the header length)\n{}", file, size, kHint);
  const uint64_t n = read_le64(bytes);
  if (n > kMaxHeader) fail("{}: header length is {}, expected at most {}\n{}", file, n, kMaxHeader, kHint);
  if (8 + n > size)
    fail("{}: header length is {} but only {} bytes follow the length field, expected 8 + header "
         "length <= file size {}\n{}",
         file, n, size - 8, size, kHint);
  if (n < 2 || bytes[8] != '{')
    fail("{}: header starts with byte {:#04x} (header length {}), expected a JSON object starting "
         "with '{{'\n{}",
         file, n ? bytes[8] : 0, n, kHint);
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  json header = parse_json_strict(text, text + n, file + " header");
  if (!header.is_object()) fail("{}: header is a JSON {}, expected an object\n{}", file, header.type_name(), kHint);

  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object())
        fail("{}: __metadata__ is {}, expected an object mapping strings to strings\n{}", file, preview(*it), kHint);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          fail("{}: __metadata__ key {} has value {} (a {}), expected a string\n{}", file, quoted(m.key()), preview(*m),
               m->type_name(), kHint);
        metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(file, it.key(), *it));
  }

  // Offsets: sorted, contiguous from 0, each spanning exactly its byte size.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin != expected) {
      const char* what =
          e.begin < expected ? "overlaps the previous tensor" : "leaves a hole after the previous tensor";
      fail("{}: tensor {} data_offsets start at {}, expected {} (the end of {}): it {}\n{}", file, quoted(e.name),
           e.begin, expected, prev ? quoted(prev->name) : "the start of the buffer", what, kHint);
    }
    if (e.end - e.begin != e.nbytes)
      fail("{}: tensor {} data_offsets [{}, {}] hold {} bytes, expected {} bytes for dtype {} shape {}\n{}", file,
           quoted(e.name), e.begin, e.end, e.end - e.begin, e.nbytes, kDTypes[int(e.dtype)].name, shape_str(e.shape),
           kHint);
    expected = e.end;
    prev = &e;
  }
  const uint64_t buffer = size - 8 - n;
  if (expected != buffer)
    fail("{}: the tensors cover {} data bytes but the file has {} bytes after the header, expected "
         "equal sizes ({})\n{}",
         file, expected, buffer, expected < buffer ? "trailing bytes" : "data out of range", kHint);

  const uint8_t* data = bytes + 8 + n;
  tensors.reserve(entries.size());
  for (Entry& e : entries) {
    TensorView t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data = data + e.begin;
    t.nbytes = size_t(e.nbytes);
    tensors.push_back(std::move(t));
  }
}

// The write plan: tensors in the reference order with their offsets, and the padded header.
struct Plan {
  std::vector<const TensorToWrite*> order;
  std::vector<uint64_t> nbytes;  // per entry of order
  std::string header;            // JSON padded with spaces to a multiple of 8
};

uint64_t tensor_bytes(const TensorToWrite& t) {
  uint64_t numel = 1;
  for (int64_t s : t.shape) {
    if (s < 0)
      fail("tensor {} has shape {}, expected non-negative sizes\nhint: fix the tensor list given to the safetensors "
           "writer",
           quoted(t.name), shape_str(t.shape));
    if (__builtin_mul_overflow(numel, uint64_t(s), &numel))
      fail("tensor {} shape {} overflows, expected a realistic size\nhint: fix the tensor list given to the "
           "safetensors writer",
           quoted(t.name), shape_str(t.shape));
  }
  uint64_t n;
  if (__builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &n))
    fail("tensor {} shape {} overflows, expected a realistic size\nhint: fix the tensor list given to the safetensors "
         "writer",
         quoted(t.name), shape_str(t.shape));
  return n;
}

// A tensor's nbytes bytes in order: its data at once, or its reader's pieces (16 MiB at most, whole
// 8-byte words but for the last) through one buffer.
template <typename F>
void for_each_piece(const TensorToWrite& t, uint64_t nbytes, F&& use) {
  if (nbytes == 0) return;
  if (!t.read) return use(t.data, 0, nbytes);
  constexpr uint64_t kPiece = uint64_t(16) << 20;
  std::vector<unsigned char> buf(size_t(std::min(kPiece, nbytes)));
  for (uint64_t off = 0; off < nbytes; off += kPiece) {
    const uint64_t n = std::min(kPiece, nbytes - off);
    t.read(buf.data(), size_t(off), size_t(n));
    use(buf.data(), off, n);
  }
}

std::string json_string(const std::string& s, const char* what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    fail("{} {} is not valid UTF-8, expected a UTF-8 string\nhint: rename it", what, quoted(s));
  }
}

Plan make_plan(const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata) {
  Plan plan;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__")
      fail("tensor name \"__metadata__\" is reserved, expected another name\nhint: fix the tensor list given to the "
           "safetensors writer");
    if (!names.insert(t.name).second)
      fail("tensor {} is given twice, expected unique names\nhint: fix the tensor list given to the safetensors writer",
           quoted(t.name));
    if (int(t.dtype) < 0 || int(t.dtype) >= kNumDTypes)
      fail("tensor {} has invalid dtype {}, expected a DType value\nhint: fix the tensor list given to the safetensors "
           "writer",
           quoted(t.name), int(t.dtype));
    plan.order.push_back(&t);
  }
  // Reference order: dtype descending in the crate's enum order, then name ascending (bytes).
  std::sort(plan.order.begin(), plan.order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    int ra = kDTypes[int(a->dtype)].rank, rb = kDTypes[int(b->dtype)].rank;
    if (ra != rb) return ra > rb;
    return a->name < b->name;
  });
  std::string& h = plan.header;
  h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ",";
      first = false;
      h += json_string(k, "metadata key") + ":" + json_string(v, "metadata value");
    }
    h += "}";
  }
  uint64_t offset = 0;
  for (const TensorToWrite* t : plan.order) {
    uint64_t nb = tensor_bytes(*t);
    if (nb > 0 && t->data == nullptr && !t->read)
      fail("tensor {} has no data, expected {} bytes\nhint: fix the tensor list given to the safetensors writer",
           quoted(t->name), nb);
    plan.nbytes.push_back(nb);
    if (h.size() > 1) h += ",";
    h += json_string(t->name, "tensor name");
    h += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[", dtype_name(t->dtype));
    for (size_t i = 0; i < t->shape.size(); ++i) {
      if (i) h += ',';
      h += std::to_string(t->shape[i]);
    }
    h += fmt::format("],\"data_offsets\":[{},{}]}}", offset, offset + nb);
    offset += nb;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return plan;
}

}  // namespace

const char* dtype_name(DType d) { return kDTypes[int(d)].name; }
int dtype_size(DType d) { return kDTypes[int(d)].size; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

const TensorView* TensorFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void TensorFile::index_names() {
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_[tensors_[i].name] = i;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : TensorFile(path), map_(path, "safetensors file", "check the path and permissions") {
  if (map_.size() < 8)
    fail("{}: file is {} bytes, expected at least 8 (the header length)\n{}", path, map_.size(), kHint);
  parse_file(map_.data(), map_.size(), path_, tensors_, metadata_);
  index_names();
}

SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<TensorFile> open_tensor_file(const std::string& path) {
  if (is_torch_file_name(path)) return std::make_unique<TorchFile>(path);
  return std::make_unique<SafetensorsFile>(path);
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    fail("cannot access checkpoint {}: {}\nhint: check the path and its permissions", path, ec.message());
  if (!fs::exists(st))
    fail("checkpoint {} does not exist, expected a folder with model.safetensors, model.safetensors.index.json, "
         "pytorch_model.bin or pytorch_model.bin.index.json, or one such file\nhint: check the path",
         path);
  if (!fs::is_directory(st)) {
    add(path);
    return;
  }
  // safetensors first, as Hugging Face prefers them when a folder holds both.
  const fs::path dir(path);
  for (const char* name :
       {"model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json", "pytorch_model.bin"}) {
    const std::string file = (dir / name).string();
    if (fs::exists(file, ec)) {
      add(file);
      return;
    }
  }
  fail("{}: found none of model.safetensors, model.safetensors.index.json, pytorch_model.bin and "
       "pytorch_model.bin.index.json, expected a Hugging Face checkpoint\nhint: point at the folder holding the "
       "weights (a checkpoint in another format, such as Meta's consolidated.00.pth, must be converted to the "
       "Hugging Face layout first)",
       path);
}

void SafetensorsCheckpoint::add(const std::string& file) {
  if (file.ends_with(".index.json"))
    add_index(file);
  else
    add_file(file);
}

void SafetensorsCheckpoint::add_file(const std::string& file) {
  files_.push_back(open_tensor_file(file));
  const TensorFile* f = files_.back().get();
  for (const TensorView& t : f->tensors()) index_[t.name] = {f, &t};
}

// Sharded: the index maps every tensor name to a shard file in the same folder.
void SafetensorsCheckpoint::add_index(const std::string& index_path) {
  std::error_code ec;
  const std::string text = read_small_file(index_path, kMaxHeader, "checkpoint index");
  json index = parse_json_strict(text.data(), text.data() + text.size(), index_path);
  if (!index.is_object())
    fail("{}: index is a JSON {}, expected an object with \"weight_map\"\n{}", index_path, index.type_name(), kHint);
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    fail("{}: \"weight_map\" is {}, expected an object mapping tensor names to shard files\n{}", index_path,
         wm == index.end() ? std::string("missing") : preview(*wm), kHint);
  const fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, const TensorFile*> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      fail("{}: weight_map maps tensor {} to {}, expected a shard file name (a string)\n{}", index_path,
           quoted(it.key()), preview(*it), kHint);
    const std::string& shard = it->get_ref<const std::string&>();
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
        shard.find('\0') != std::string::npos)
      fail("{}: weight_map maps tensor {} to {}, expected a file name in the same folder\n{}", index_path,
           quoted(it.key()), quoted(shard), kHint);
    auto s = shards.find(shard);
    if (s == shards.end()) {
      const std::string shard_path = (dir / shard).string();
      if (!fs::exists(shard_path, ec))
        fail("{}: weight_map maps tensor {} to shard {}, but {} does not exist, expected every "
             "shard file next to the index\nhint: the checkpoint is incomplete; re-download the "
             "missing shard",
             index_path, quoted(it.key()), quoted(shard), shard_path);
      files_.push_back(open_tensor_file(shard_path));
      s = shards.emplace(shard, files_.back().get()).first;
    }
    const TensorView* t = s->second->find(it.key());
    if (!t)
      fail("{}: weight_map maps tensor {} to shard {}, but that shard does not contain it, expected "
           "the tensor in that file\n{}",
           index_path, quoted(it.key()), s->second->path(), kHint);
    index_[it.key()] = {s->second, t};
  }
}

const TensorView* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.second;
}

const TensorView& SafetensorsCheckpoint::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t)
    fail("{}: tensor {} not found, expected it among the checkpoint's {} tensors\nhint: the checkpoint "
         "does not match the model (wrong architecture or naming)",
         path_, quoted(name), index_.size());
  return *t;
}

const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const {
  get(name);
  return index_.at(name).first->path();
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

namespace {

// out (n) = to_f32 of each 16-bit value at src (n values, possibly unaligned).
template <class F>
void widen_halves(float* out, const uint8_t* src, int64_t n, F to_f32) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = to_f32(h);
  }
}

}  // namespace

void SafetensorsCheckpoint::read_f32(const std::string& name, const std::vector<int64_t>& expected_shape,
                                     float* out) const {
  int64_t numel = 1;
  for (int64_t d : expected_shape) numel *= d;
  read_f32(name, expected_shape, 0, numel, out);
}

void SafetensorsCheckpoint::read_f32(const std::string& name, const std::vector<int64_t>& expected_shape, int64_t first,
                                     int64_t n, float* out) const {
  const TensorView& t = get(name);
  const std::string& file = index_.at(name).first->path();
  if (t.shape != expected_shape)
    fail("{}: tensor {} has shape {}, expected {}\nhint: the checkpoint does not match the model config", file,
         quoted(name), shape_str(t.shape), shape_str(expected_shape));
  CHECK(first >= 0 && n >= 0 && first + n <= t.numel(), "read_f32 of elements [{}, {}) of {} ({} elements)", first,
        first + n, name, t.numel());
  // (n,) elements of t.dtype, possibly unaligned
  const uint8_t* src = t.data + size_t(first) * size_t(dtype_size(t.dtype));
  switch (t.dtype) {
    case DType::F32:
      if (n > 0) std::memcpy(out, src, size_t(n) * 4);
      break;
    case DType::BF16: widen_halves(out, src, n, [](uint16_t h) { return to_float(bf16{h}); }); break;
    case DType::F16: widen_halves(out, src, n, f16_to_float); break;
    default:
      fail("{}: tensor {} has dtype {}, expected F32, BF16 or F16\nhint: the checkpoint stores this "
           "weight in a type llamatrain does not convert",
           file, quoted(name), dtype_name(t.dtype));
  }
}

std::vector<uint8_t> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  Plan plan = make_plan(tensors, metadata);
  uint64_t total = 8 + plan.header.size();
  for (uint64_t nb : plan.nbytes) total += nb;
  std::vector<uint8_t> out(total);
  put_le64(out.data(), plan.header.size());
  std::memcpy(out.data() + 8, plan.header.data(), plan.header.size());
  uint64_t pos = 8 + plan.header.size();
  for (size_t i = 0; i < plan.order.size(); ++i) {
    for_each_piece(*plan.order[i], plan.nbytes[i],
                   [&](const void* p, uint64_t off, uint64_t n) { std::memcpy(out.data() + pos + off, p, n); });
    pos += plan.nbytes[i];
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata, const BytesDone& progress) {
  Plan plan = make_plan(tensors, metadata);
  uint8_t len[8];
  put_le64(len, plan.header.size());
  uint64_t total = 8 + plan.header.size();
  for (uint64_t nb : plan.nbytes) total += nb;
  AtomicFile f(path, total >= (uint64_t(64) << 20));  // large files straight to the disk (O_DIRECT)
  f.write(len, 8);
  f.write(plan.header);
  for (size_t i = 0; i < plan.order.size(); ++i) {
    for_each_piece(*plan.order[i], plan.nbytes[i], [&](const void* p, uint64_t, uint64_t n) { f.write(p, size_t(n)); });
    if (progress) progress(int64_t(plan.nbytes[i]));
  }
  f.commit();
}

void write_safetensors_sharded(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                               int64_t max_shard_bytes, const BytesDone& progress) {
  if (max_shard_bytes <= 0)
    fail("max shard size is {} bytes, expected a positive size\nhint: Hugging Face uses 5GB", max_shard_bytes);
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors)
    if (!names.insert(t.name).second)
      fail("tensor {} is given twice, expected unique names\nhint: fix the tensor list given to the safetensors writer",
           quoted(t.name));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create folder {}: {}\nhint: check the path and permissions", dir, ec.message());

  // Hugging Face's split: walk in the given order; a tensor above the limit gets a shard of its
  // own (appended right away); otherwise start a new shard when this one would overflow.
  std::vector<std::vector<TensorToWrite>> shards;
  std::vector<TensorToWrite> current;
  uint64_t current_size = 0, total_size = 0;
  const uint64_t max = uint64_t(max_shard_bytes);
  for (const TensorToWrite& t : tensors) {
    const uint64_t nb = tensor_bytes(t);
    total_size += nb;
    if (nb > max) {
      shards.push_back({t});
      continue;
    }
    if (current_size + nb > max) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(t);
    current_size += nb;
  }
  if (!current.empty()) shards.push_back(std::move(current));

  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  const fs::path d(dir);
  if (shards.size() <= 1) {
    write_safetensors((d / "model.safetensors").string(), shards.empty() ? std::vector<TensorToWrite>{} : shards[0],
                      meta, progress);
    fs::remove(d / "model.safetensors.index.json", ec);  // a stale index would shadow the new file
    return;
  }
  json weight_map = json::object();
  const size_t k = shards.size();
  for (size_t i = 0; i < k; ++i) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, k);
    write_safetensors((d / name).string(), shards[i], meta, progress);
    for (const TensorToWrite& t : shards[i]) weight_map[t.name] = name;
  }
  json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  // As transformers writes it: indent 2, sorted keys (std::map order), ASCII escapes, newline.
  const std::string text = index.dump(2, ' ', true) + "\n";
  write_file_atomic((d / "model.safetensors.index.json").string(), text);
}

}  // namespace llamatrain::io
