// torch.save archives (torch_checkpoint.h, docs/formats.md §4.5), read in three steps, each validated
// before anything points into the file: the zip's central directory (zip64 when torch wrote one) gives
// each stored entry's byte range; ARCHIVE/data.pkl runs on a pickle machine whose objects are plain
// values, containers, storages and tensors, held in pools the machine owns (so hostile nesting or a
// cycle costs no recursion, and nothing is ever called); the state dict's tensors are then checked
// against their storage entries. Every failure throws Error naming the file.
#include "io/torch_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace llamatrain::io {

namespace {

constexpr const char* kCorrupt =
    "hint: the file is truncated or corrupt; re-download it, or re-save it with torch.save";
constexpr const char* kStateDictOnly =
    "hint: llamatrain runs no code from a checkpoint; load it in Python and save the state dict alone, "
    "torch.save(model.state_dict(), \"pytorch_model.bin\"), or convert it to safetensors";
constexpr uint64_t kMaxPickle = uint64_t(64) << 20;  // data.pkl of a state dict is kilobytes per tensor at most

// A name from the file, fit for a message: non-printable bytes as \xNN, at most 100 characters.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= 100) return out + "...";
    if (c >= 0x20 && c < 0x7f)
      out += char(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- zip (APPNOTE.TXT: local headers, the central directory, the end records) ----

constexpr uint64_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint64_t kEnd64Sig = 0x06064b50, kLocator64Sig = 0x07064b50;
constexpr uint64_t kMax32 = 0xffffffff;

struct ZipEntry {
  uint64_t offset = 0;  // of the entry's data in the file
  uint64_t size = 0;
};

struct Directory {
  uint64_t entries = 0, offset = 0, size = 0;
};

// torch.save's zip starts with a local header; the legacy format starts with a pickle.
void check_zip_magic(const uint8_t* b, uint64_t size, const std::string& file) {
  if (size >= 4 && le(b, 4) == kLocalSig) return;
  if (size == 0) fail("{}: is empty, expected a zip archive as torch.save writes\n{}", file, kCorrupt);
  if (size >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
    fail("{}: is a PyTorch file in the legacy format (torch.save before PyTorch 1.6, or with "
         "_use_new_zipfile_serialization=False), which llamatrain does not read, expected the zip archive "
         "torch.save writes by default\nhint: re-save it with a current torch: "
         "torch.save(torch.load(path, map_location=\"cpu\"), path), or convert it to safetensors",
         file);
  fail("{}: starts with bytes {:02x}, expected a zip archive (\"PK\\x03\\x04\") as torch.save writes\n{}", file,
       fmt::join(b, b + std::min<uint64_t>(size, 4), " "), kCorrupt);
}

// The end of central directory record: 22 bytes and a comment ending the file.
uint64_t find_end_record(const uint8_t* b, uint64_t size, const std::string& file) {
  if (size >= 22) {
    const uint64_t lowest = size > 22 + 0xffff ? size - 22 - 0xffff : 0;
    for (uint64_t pos = size - 22;; --pos) {
      if (le(b + pos, 4) == kEndSig && pos + 22 + le(b + pos + 20, 2) == size) return pos;
      if (pos == lowest) break;
    }
  }
  fail("{}: has no zip end-of-central-directory record, expected one at the end of the archive\n{}", file, kCorrupt);
}

// Where the central directory is and how many entries it has, from the end record or, when a field
// overflows it, from the zip64 end record its locator points at.
Directory read_directory_location(const uint8_t* b, uint64_t size, const std::string& file) {
  const uint64_t end = find_end_record(b, size, file);
  Directory d{le(b + end + 10, 2), le(b + end + 16, 4), le(b + end + 12, 4)};
  uint64_t limit = end;  // the directory ends before the end records
  if (d.entries == 0xffff || d.offset == kMax32 || d.size == kMax32) {
    if (end < 20 || le(b + end - 20, 4) != kLocator64Sig)
      fail("{}: the zip end record points to zip64 fields but no zip64 locator precedes it\n{}", file, kCorrupt);
    const uint64_t at = le(b + end - 20 + 8, 8);
    if (at > end - 20 || end - 20 - at < 56 || le(b + at, 4) != kEnd64Sig)
      fail("{}: the zip64 locator points at byte {}, where there is no zip64 end record\n{}", file, at, kCorrupt);
    d = {le(b + at + 32, 8), le(b + at + 48, 8), le(b + at + 40, 8)};
    limit = at;
  }
  if (d.offset > limit || d.size > limit - d.offset)
    fail("{}: the zip central directory spans bytes [{}, +{}), expected it inside the file's {} bytes\n{}", file,
         d.offset, d.size, limit, kCorrupt);
  return d;
}

// The zip64 extended information of a central directory entry: the 64-bit values of the fields that
// hold 0xffffffff, in the order uncompressed size, compressed size, local header offset.
void read_zip64_extra(const uint8_t* extra, uint64_t n, const std::string& file, const std::string& name,
                      std::initializer_list<uint64_t*> fields) {
  for (uint64_t pos = 0; pos + 4 <= n;) {
    const uint64_t id = le(extra + pos, 2), len = le(extra + pos + 2, 2);
    if (len > n - pos - 4) break;
    if (id == 1) {
      uint64_t at = pos + 4;
      for (uint64_t* f : fields) {
        if (*f != kMax32) continue;
        if (at + 8 > pos + 4 + len)
          fail("{}: zip entry {} has a zip64 field too short for its sizes\n{}", file, printable(name), kCorrupt);
        *f = le(extra + at, 8);
        at += 8;
      }
      return;
    }
    pos += 4 + len;
  }
  fail("{}: zip entry {} has 32-bit fields set to 0xffffffff but no zip64 field\n{}", file, printable(name), kCorrupt);
}

// The offset of an entry's data: after its local header, whose name must be the directory's.
uint64_t local_data_offset(const uint8_t* b, uint64_t size, uint64_t at, const std::string& name,
                           const std::string& file) {
  if (at > size || size - at < 30 || le(b + at, 4) != kLocalSig)
    fail("{}: zip entry {} has no local header at byte {}\n{}", file, printable(name), at, kCorrupt);
  const uint64_t n = le(b + at + 26, 2), m = le(b + at + 28, 2);
  if (30 + n + m > size - at || n != name.size() || std::memcmp(b + at + 30, name.data(), n) != 0)
    fail("{}: zip entry {}'s local header at byte {} does not match the central directory\n{}", file, printable(name),
         at, kCorrupt);
  return at + 30 + n + m;
}

// Every entry of the central directory by name, each stored (not compressed) and inside the file.
std::map<std::string, ZipEntry> read_zip(const uint8_t* b, uint64_t size, const std::string& file) {
  check_zip_magic(b, size, file);
  const Directory d = read_directory_location(b, size, file);
  std::map<std::string, ZipEntry> entries;
  uint64_t pos = d.offset;
  const uint64_t end = d.offset + d.size;
  for (uint64_t i = 0; i < d.entries; ++i) {
    if (end - pos < 46 || le(b + pos, 4) != kCentralSig)
      fail("{}: zip central directory entry {} of {} at byte {} is cut short or has no signature\n{}", file, i,
           d.entries, pos, kCorrupt);
    const uint64_t flags = le(b + pos + 8, 2), method = le(b + pos + 10, 2);
    uint64_t compressed = le(b + pos + 20, 4), uncompressed = le(b + pos + 24, 4), local = le(b + pos + 42, 4);
    const uint64_t n = le(b + pos + 28, 2), m = le(b + pos + 30, 2), k = le(b + pos + 32, 2);
    if (46 + n + m + k > end - pos)
      fail("{}: zip central directory entry {} at byte {} runs past the directory\n{}", file, i, pos, kCorrupt);
    const std::string name(reinterpret_cast<const char*>(b + pos + 46), n);
    if (uncompressed == kMax32 || compressed == kMax32 || local == kMax32)
      read_zip64_extra(b + pos + 46 + n, m, file, name, {&uncompressed, &compressed, &local});
    if (flags & 1)
      fail("{}: zip entry {} is encrypted, expected the plain entries torch.save writes\n{}", file, printable(name),
           kCorrupt);
    if (method != 0)
      fail("{}: zip entry {} is compressed (zip method {}), expected it stored uncompressed as torch.save writes "
           "it\nhint: re-save the checkpoint with torch.save (a zip tool that recompresses it makes it unreadable "
           "in place)",
           file, printable(name), method);
    if (compressed != uncompressed)
      fail("{}: zip entry {} is stored with {} bytes but holds {}, expected equal sizes\n{}", file, printable(name),
           compressed, uncompressed, kCorrupt);
    const uint64_t data = local_data_offset(b, size, local, name, file);
    if (uncompressed > size - data)
      fail("{}: zip entry {} spans bytes [{}, {}), past the end of the file ({} bytes)\n{}", file, printable(name),
           data, data + uncompressed, size, kCorrupt);
    if (!entries.emplace(name, ZipEntry{data, uncompressed}).second)
      fail("{}: zip entry {} appears twice, expected each name once\n{}", file, printable(name), kCorrupt);
    pos += 46 + n + m + k;
  }
  return entries;
}

// The archive's folder: torch.save puts everything under one (the file's stem, or "archive").
std::string archive_prefix(const std::map<std::string, ZipEntry>& entries, const std::string& file) {
  for (const auto& kv : entries) {
    const std::string& name = kv.first;
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0)
      return name.substr(0, slash + 1);
  }
  const bool script =
      std::any_of(entries.begin(), entries.end(), [](const auto& kv) { return kv.first.ends_with("/constants.pkl"); });
  fail("{}: the zip archive holds no ARCHIVE/data.pkl{}, expected an archive written by torch.save\n{}", file,
       script ? " (it is a TorchScript model)" : "", script ? kStateDictOnly : kCorrupt);
}

// ---- pickle (Lib/pickletools.py describes each opcode) ----

enum class Kind : uint8_t { none, boolean, integer, real, string, tuple, list, dict, global, storage, tensor };

const char* kind_name(Kind k) {
  static constexpr const char* kNames[] = {"None", "bool", "int",    "float",   "str",   "tuple",
                                           "list", "dict", "global", "storage", "tensor"};
  return kNames[int(k)];
}

// The kind with its article, for messages: "an int", "a tensor", "None".
std::string a_kind(Kind k) {
  if (k == Kind::none) return "None";
  return fmt::format("{} {}", k == Kind::integer ? "an" : "a", kind_name(k));
}

// A value on the machine's stack: an int or float in place, anything else an index into its pool.
struct Value {
  Kind kind = Kind::none;
  int64_t i = 0;  // the bool or int, or the pool index
  double f = 0;
};

// The callables a state dict is rebuilt with; any other global is refused when it is named.
enum class Callable { ordered_dict, rebuild_tensor, rebuild_parameter, storage_class };

struct Global {
  std::string name;  // "module.name"
  Callable callable;
  DType dtype = DType::U8;  // a storage class's element type
};

struct Storage {
  std::string key;  // ARCHIVE/data/<key>
  DType dtype;
  int64_t numel;
};

struct Tensor {
  int64_t storage;  // index into the storage pool
  int64_t offset;   // in elements
  std::vector<int64_t> shape, stride;
};

// torch.save names each storage by its legacy class, "torch.FloatStorage" (torch.cuda.* in old files).
const std::map<std::string, DType>& storage_classes() {
  static const std::map<std::string, DType> m = {{"FloatStorage", DType::F32},     {"HalfStorage", DType::F16},
                                                 {"BFloat16Storage", DType::BF16}, {"DoubleStorage", DType::F64},
                                                 {"LongStorage", DType::I64},      {"IntStorage", DType::I32},
                                                 {"ShortStorage", DType::I16},     {"CharStorage", DType::I8},
                                                 {"ByteStorage", DType::U8},       {"BoolStorage", DType::BOOL}};
  return m;
}

// The whitelist: the global `module.name` as a callable, or nullopt.
std::optional<Global> allowed_global(const std::string& module, const std::string& name) {
  const std::string full = module + "." + name;
  if (full == "collections.OrderedDict") return Global{full, Callable::ordered_dict};
  if (full == "torch._utils._rebuild_tensor_v2" || full == "torch._utils._rebuild_tensor")
    return Global{full, Callable::rebuild_tensor};
  if (full == "torch._utils._rebuild_parameter") return Global{full, Callable::rebuild_parameter};
  if (module == "torch" || module == "torch.cuda") {
    auto it = storage_classes().find(name);
    if (it != storage_classes().end()) return Global{full, Callable::storage_class, it->second};
  }
  return std::nullopt;
}

// Runs a pickle's opcodes to STOP, building values and never calling anything: the only callables are
// the whitelisted globals, which it interprets itself.
class Unpickler {
 public:
  Unpickler(const uint8_t* data, uint64_t size, const std::string& file) : data_(data), size_(size), file_(file) {}

  Value load() {
    while (pos_ < size_) {
      op_at_ = pos_;
      const uint8_t op = data_[pos_++];
      if (op == '.') return pop();
      run(op);
    }
    corrupt("it ends without the STOP opcode");
  }

  const std::string& str(Value v) const { return strings_[size_t(v.i)]; }
  const std::vector<Value>& items(Value v) const { return containers_[size_t(v.i)]; }  // dict: key, value, ...
  const Tensor& tensor(Value v) const { return tensors_[size_t(v.i)]; }
  const Storage& storage(const Tensor& t) const { return storages_[size_t(t.storage)]; }

 private:
  template <typename... Args>
  [[noreturn]] void corrupt(fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: data.pkl at byte {}: {}\n{}", file_, op_at_, fmt::format(f, std::forward<Args>(args)...), kCorrupt);
  }

  // ---- reading operands ----
  const uint8_t* take(uint64_t n) {
    if (n > size_ - pos_) corrupt("an operand of {} bytes runs past the end of data.pkl ({} bytes)", n, size_);
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  uint64_t read_uint(int n) { return le(take(uint64_t(n)), n); }
  std::string read_line() {
    const uint64_t start = pos_;
    while (pos_ < size_ && pos_ - start < 256 && data_[pos_] != '\n') ++pos_;
    if (pos_ >= size_ || data_[pos_] != '\n') corrupt("a GLOBAL name is not ended by a newline within 256 bytes");
    return std::string(reinterpret_cast<const char*>(data_ + start), size_t(pos_++ - start));
  }

  // ---- the stack ----
  void push(Value v) { stack_.push_back(v); }
  Value pop() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) corrupt("an opcode pops an empty stack");
    Value v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) corrupt("an opcode reads an empty stack");
    return stack_.back();
  }
  // The values above the last mark, removed from the stack with the mark.
  std::vector<Value> pop_to_mark() {
    if (marks_.empty()) corrupt("an opcode pops to a MARK that was never set");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<Value> out(stack_.begin() + std::ptrdiff_t(mark), stack_.end());
    stack_.resize(mark);
    return out;
  }
  Value new_container(Kind kind, std::vector<Value> items) {
    containers_.push_back(std::move(items));
    return {kind, int64_t(containers_.size() - 1)};
  }
  Value new_string(uint64_t n) {
    const uint8_t* p = take(n);
    strings_.emplace_back(reinterpret_cast<const char*>(p), size_t(n));
    return {Kind::string, int64_t(strings_.size() - 1)};
  }
  Value new_int(int64_t v) { return {Kind::integer, v}; }
  // LONG1: n little-endian two's complement bytes.
  Value new_long(uint64_t n) {
    if (n > 8) corrupt("an integer of {} bytes, expected at most 8", n);
    const uint8_t* p = take(n);
    uint64_t v = le(p, int(n));
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t(0) << (8 * n);
    return new_int(int64_t(v));
  }
  Value new_float() {
    uint64_t bits = 0;
    for (const uint8_t *p = take(8), *e = p + 8; p < e; ++p) bits = (bits << 8) | *p;  // big-endian
    Value v{Kind::real};
    std::memcpy(&v.f, &bits, 8);
    return v;
  }

  // ---- containers ----
  std::vector<Value>& container_under(const std::vector<Value>& added, Kind kind, const char* op) {
    Value& c = top();
    if (c.kind != kind)
      corrupt("{} adds {} values to {}, expected a {}", op, added.size(), a_kind(c.kind), kind_name(kind));
    return containers_[size_t(c.i)];
  }
  void add_items(std::vector<Value> added, Kind kind, const char* op) {
    if (kind == Kind::dict && added.size() % 2)
      corrupt("{} has {} values, expected key and value pairs", op, added.size());
    std::vector<Value>& c = container_under(added, kind, op);
    c.insert(c.end(), added.begin(), added.end());
  }
  // The top n values, removed from the stack, in stack order.
  std::vector<Value> pop_n(int n) {
    std::vector<Value> out(static_cast<size_t>(n));
    for (int i = n - 1; i >= 0; --i) out[static_cast<size_t>(i)] = pop();
    return out;
  }

  // ---- memo ----
  void put(uint64_t key) { memo_[key] = top(); }
  void get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) corrupt("memo entry {} is read before it is written", key);
    push(it->second);
  }

  // ---- globals, calls and storages ----
  void global(const std::string& module, const std::string& name) {
    const std::optional<Global> g = allowed_global(module, name);
    if (!g)
      fail("{}: holds {}.{}, expected only tensors and plain containers (a state dict)\n{}", file_, printable(module),
           printable(name), kStateDictOnly);
    globals_.push_back(*g);
    push({Kind::global, int64_t(globals_.size() - 1)});
  }
  void stack_global() {
    const Value name = pop(), module = pop();
    if (name.kind != Kind::string || module.kind != Kind::string)
      corrupt("STACK_GLOBAL takes {} and {}, expected two strings", a_kind(module.kind), a_kind(name.kind));
    global(str(module), str(name));
  }
  std::string kinds(const std::vector<Value>& args) const {
    std::string s;
    for (const Value& v : args) {
      if (!s.empty()) s += ", ";
      s += kind_name(v.kind);
    }
    return s;
  }
  std::vector<int64_t> int_tuple(Value v, const char* what) const {
    if (v.kind != Kind::tuple) corrupt("a tensor's {} is {}, expected a tuple of integers", what, a_kind(v.kind));
    std::vector<int64_t> out;
    for (const Value& x : items(v)) {
      if (x.kind != Kind::integer) corrupt("a tensor's {} holds {}, expected integers", what, a_kind(x.kind));
      out.push_back(x.i);
    }
    return out;
  }
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]).
  Value rebuild_tensor(const Global& g, const std::vector<Value>& a) {
    if (a.size() < 4 || a[0].kind != Kind::storage || a[1].kind != Kind::integer)
      corrupt("{} is called with ({}), expected (storage, storage offset, size, stride, ...)", g.name, kinds(a));
    tensors_.push_back({a[0].i, a[1].i, int_tuple(a[2], "size"), int_tuple(a[3], "stride")});
    if (tensors_.back().shape.size() != tensors_.back().stride.size())
      corrupt("a tensor has {} sizes and {} strides, expected one stride per dimension", tensors_.back().shape.size(),
              tensors_.back().stride.size());
    return {Kind::tensor, int64_t(tensors_.size() - 1)};
  }
  void reduce() {
    const Value args = pop(), fn = pop();
    if (fn.kind != Kind::global || args.kind != Kind::tuple)
      corrupt("REDUCE calls {} with {}, expected a global and a tuple", a_kind(fn.kind), a_kind(args.kind));
    const Global& g = globals_[size_t(fn.i)];
    const std::vector<Value>& a = items(args);
    switch (g.callable) {
      case Callable::ordered_dict:
        if (!a.empty()) corrupt("{} is called with ({}), expected no arguments", g.name, kinds(a));
        return push(new_container(Kind::dict, {}));
      case Callable::rebuild_tensor: return push(rebuild_tensor(g, a));
      case Callable::rebuild_parameter:  // (tensor, requires_grad, backward_hooks): the tensor
        if (a.empty() || a[0].kind != Kind::tensor)
          corrupt("{} is called with ({}), expected a tensor first", g.name, kinds(a));
        return push(a[0]);
      case Callable::storage_class: corrupt("{} is called, expected it only in a storage's persistent id", g.name);
    }
  }
  // BUILD sets an object's state: an OrderedDict's attributes (a state dict's _metadata), ignored.
  void build() {
    const Value state = pop();
    if (top().kind != Kind::dict)
      corrupt("BUILD sets the state of {} to {}, expected it only on a dict", a_kind(top().kind), a_kind(state.kind));
  }
  // ('storage', storage class, key, location, numel): the storage is the archive's data/<key>.
  void persistent_load() {
    const Value pid = pop();
    const std::vector<Value> no;
    const std::vector<Value>& a = pid.kind == Kind::tuple ? items(pid) : no;
    if (a.size() != 5 || a[0].kind != Kind::string || str(a[0]) != "storage" || a[1].kind != Kind::global ||
        globals_[size_t(a[1].i)].callable != Callable::storage_class || a[2].kind != Kind::string ||
        a[4].kind != Kind::integer || a[4].i < 0)
      corrupt("a persistent id is ({}), expected ('storage', storage class, key, location, size)",
              pid.kind == Kind::tuple ? kinds(a) : kind_name(pid.kind));
    storages_.push_back({str(a[2]), globals_[size_t(a[1].i)].dtype, a[4].i});
    push({Kind::storage, int64_t(storages_.size() - 1)});
  }

  void run(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint64_t v = read_uint(1);
        if (v < 2 || v > 5) corrupt("pickle protocol {}, expected 2 to 5", v);
        return;
      }
      case 0x95: take(8); return;  // FRAME: a length only
      case '(': marks_.push_back(stack_.size()); return;
      case ')': return push(new_container(Kind::tuple, {}));
      case ']': return push(new_container(Kind::list, {}));
      case '}': return push(new_container(Kind::dict, {}));
      case 'N': return push({Kind::none});
      case 0x88: return push({Kind::boolean, 1});
      case 0x89: return push({Kind::boolean, 0});
      case 'J': return push(new_int(int32_t(uint32_t(read_uint(4)))));
      case 'K': return push(new_int(int64_t(read_uint(1))));
      case 'M': return push(new_int(int64_t(read_uint(2))));
      case 0x8a: return push(new_long(read_uint(1)));
      case 'G': return push(new_float());
      case 'X': return push(new_string(read_uint(4)));
      case 0x8c: return push(new_string(read_uint(1)));
      case 0x8d: return push(new_string(read_uint(8)));
      case 't': return push(new_container(Kind::tuple, pop_to_mark()));
      case 0x85: return push(new_container(Kind::tuple, pop_n(1)));
      case 0x86: return push(new_container(Kind::tuple, pop_n(2)));
      case 0x87: return push(new_container(Kind::tuple, pop_n(3)));
      case 's': return add_items(pop_n(2), Kind::dict, "SETITEM");
      case 'u': return add_items(pop_to_mark(), Kind::dict, "SETITEMS");
      case 'a': return add_items(pop_n(1), Kind::list, "APPEND");
      case 'e': return add_items(pop_to_mark(), Kind::list, "APPENDS");
      case 'q': return put(read_uint(1));
      case 'r': return put(read_uint(4));
      case 0x94: return put(memo_.size());
      case 'h': return get(read_uint(1));
      case 'j': return get(read_uint(4));
      case 'c': {
        const std::string module = read_line();
        return global(module, read_line());
      }
      case 0x93: return stack_global();
      case 'R': return reduce();
      case 'b': return build();
      case 'Q': return persistent_load();
      default:
        corrupt("opcode {:#04x}{}, which llamatrain does not interpret, expected only the opcodes torch.save "
                "writes for a state dict",
                op, op >= 0x20 && op < 0x7f ? fmt::format(" ('{}')", char(op)) : "");
    }
  }

  const uint8_t* data_;
  uint64_t size_;
  const std::string& file_;
  uint64_t pos_ = 0, op_at_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;  // stack sizes at each MARK
  std::unordered_map<uint64_t, Value> memo_;
  // The pools values index into.
  std::vector<std::string> strings_;
  std::vector<std::vector<Value>> containers_;
  std::vector<Global> globals_;
  std::vector<Storage> storages_;
  std::vector<Tensor> tensors_;
};

// ---- the state dict ----

bool is_state_dict(const Unpickler& u, Value d) {
  if (d.kind != Kind::dict) return false;
  const std::vector<Value>& kv = u.items(d);
  for (size_t i = 0; i < kv.size(); i += 2)
    if (kv[i].kind != Kind::string || kv[i + 1].kind != Kind::tensor) return false;
  return true;
}

// The dict of names to tensors: the top-level dict, or the one under "state_dict", "model" or "module".
Value find_state_dict(const Unpickler& u, Value top, const std::string& file) {
  if (top.kind != Kind::dict)
    fail("{}: holds {}, expected a dict of tensors (a state dict)\n{}", file, a_kind(top.kind), kStateDictOnly);
  if (is_state_dict(u, top)) return top;
  const std::vector<Value>& kv = u.items(top);
  for (const char* key : {"state_dict", "model", "module"})
    for (size_t i = 0; i < kv.size(); i += 2)
      if (kv[i].kind == Kind::string && u.str(kv[i]) == key && is_state_dict(u, kv[i + 1])) return kv[i + 1];
  size_t bad = 0;
  while (kv[bad].kind == Kind::string && kv[bad + 1].kind == Kind::tensor) bad += 2;
  fail("{}: holds a dict whose entry {} is {}, expected a state dict (names to tensors), or one under "
       "\"state_dict\", \"model\" or \"module\"\n{}",
       file, kv[bad].kind == Kind::string ? printable(u.str(kv[bad])) : kind_name(kv[bad].kind),
       a_kind(kv[bad + 1].kind), kStateDictOnly);
}

std::string dims(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

// The tensor's elements: non-negative sizes whose product fits.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& file, const std::string& name) {
  int64_t n = 1;
  for (int64_t s : shape)
    if (s < 0 || __builtin_mul_overflow(n, s, &n))
      fail("{}: tensor {} has size {}, expected non-negative sizes of a realistic tensor\n{}", file, printable(name),
           dims(shape), kCorrupt);
  return n;
}

// Row-major strides, where a dimension of size 1 may have any stride.
void check_contiguous(const Tensor& t, const std::string& file, const std::string& name) {
  int64_t expected = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] != 1 && t.stride[d] != expected)
      fail("{}: tensor {} of size {} has strides {}, expected row-major (contiguous) strides\nhint: save contiguous "
           "tensors: torch.save({{k: v.contiguous() for k, v in state_dict.items()}}, \"pytorch_model.bin\")",
           file, printable(name), dims(t.shape), dims(t.stride));
    expected *= t.shape[d];
  }
}

// The view of tensor `name`: its elements [offset, offset + numel) of its storage's entry, in the mmap.
TensorView tensor_view(const std::string& name, const Tensor& t, const Storage& s, const uint8_t* file_bytes,
                       const std::map<std::string, ZipEntry>& entries, const std::string& prefix,
                       const std::string& file) {
  auto it = entries.find(prefix + "data/" + s.key);
  if (it == entries.end())
    fail("{}: tensor {} lives in storage {}, but the archive has no entry {}data/{}, expected every storage the "
         "pickle names\n{}",
         file, printable(name), printable(s.key), printable(prefix), printable(s.key), kCorrupt);
  const ZipEntry& e = it->second;
  const uint64_t esize = uint64_t(dtype_size(s.dtype));
  uint64_t declared = 0;
  if (__builtin_mul_overflow(uint64_t(s.numel), esize, &declared) || declared != e.size)
    fail("{}: storage {} holds {} bytes, expected {} (the {} elements of {} the pickle declares)\n{}", file,
         printable(s.key), e.size, declared, s.numel, dtype_name(s.dtype), kCorrupt);
  const int64_t numel = checked_numel(t.shape, file, name);
  if (numel > 0) check_contiguous(t, file, name);
  const uint64_t storage_numel = e.size / esize;
  if (t.offset < 0 || uint64_t(t.offset) > storage_numel || uint64_t(numel) > storage_numel - uint64_t(t.offset))
    fail("{}: tensor {} of size {} starts at element {} of storage {}, which holds {} elements, expected the tensor "
         "inside its storage\n{}",
         file, printable(name), dims(t.shape), t.offset, printable(s.key), storage_numel, kCorrupt);
  TensorView v;
  v.name = name;
  v.dtype = s.dtype;
  v.shape = t.shape;
  v.data = file_bytes + e.offset + uint64_t(t.offset) * esize;
  v.nbytes = size_t(uint64_t(numel) * esize);
  return v;
}

// The byteorder entry of newer archives: tensors are read as little-endian.
void check_byte_order(const uint8_t* b, const std::map<std::string, ZipEntry>& entries, const std::string& prefix,
                      const std::string& file) {
  auto it = entries.find(prefix + "byteorder");
  if (it == entries.end()) return;
  const std::string order(reinterpret_cast<const char*>(b + it->second.offset), size_t(it->second.size));
  if (order != "little")
    fail("{}: was written on a {}-endian machine, expected little-endian tensors\nhint: re-save it with torch.save "
         "on a little-endian machine (x86-64, ARM), or convert it to safetensors",
         file, printable(order));
}

}  // namespace

bool is_torch_file_name(const std::string& path) {
  return path.ends_with(".bin") || path.ends_with(".pt") || path.ends_with(".pth");
}

TorchFile::TorchFile(const std::string& path)
    : TensorFile(path), map_(path, "PyTorch checkpoint", "check the path and permissions") {
  const uint8_t* b = map_.data();
  const std::map<std::string, ZipEntry> entries = read_zip(b, map_.size(), path_);
  const std::string prefix = archive_prefix(entries, path_);
  check_byte_order(b, entries, prefix, path_);
  const ZipEntry& pkl = entries.at(prefix + "data.pkl");
  if (pkl.size > kMaxPickle)
    fail("{}: {}data.pkl is {} bytes, expected at most {} for a state dict\n{}", path_, printable(prefix), pkl.size,
         kMaxPickle, kStateDictOnly);
  Unpickler u(b + pkl.offset, pkl.size, path_);
  const Value dict = find_state_dict(u, u.load(), path_);
  const std::vector<Value>& kv = u.items(dict);
  std::set<std::string> names;
  for (size_t i = 0; i < kv.size(); i += 2) {
    const std::string& name = u.str(kv[i]);
    if (!names.insert(name).second)
      fail("{}: tensor {} appears twice in the state dict, expected each name once\n{}", path_, printable(name),
           kCorrupt);
    const Tensor& t = u.tensor(kv[i + 1]);
    tensors_.push_back(tensor_view(name, t, u.storage(t), b, entries, prefix, path_));
  }
  index_names();
}

TorchFile::~TorchFile() = default;

}  // namespace llamatrain::io
