// safetensors (docs/formats.md section 3): mmap-based reader for one file or a sharded checkpoint
// (model.safetensors.index.json; a folder of pytorch_model.bin files opens through the same checkpoint
// class, io/torch_checkpoint.h reading them), and a writer that produces byte-identical output to the
// reference implementation (dtype-descending then name order, compact JSON, 8-byte padded header,
// __metadata__ first). Every validation failure throws Error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/file.h"

namespace llamatrain::io {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, U16, U32, U64 };
const char* dtype_name(DType d);  // "F32", ...
int dtype_size(DType d);          // bytes per element

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mmap; valid while the owning file lives
  size_t nbytes = 0;
  int64_t numel() const;
};

// A file of named tensors, mmapped and fully validated at open: a .safetensors file (below) or a
// torch.save archive (io/torch_checkpoint.h). Its TensorViews point into the mmap.
class TensorFile {
 public:
  virtual ~TensorFile() = default;
  TensorFile(const TensorFile&) = delete;
  TensorFile& operator=(const TensorFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  // nullptr if absent

 protected:
  explicit TensorFile(const std::string& path) : path_(path) {}
  void index_names();  // by_name_ from tensors_, once they are filled

  std::string path_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> by_name_;  // name -> index in tensors_
};

// One mmapped .safetensors file; tensors() in offset order.
class SafetensorsFile : public TensorFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws Error
  ~SafetensorsFile() override;

  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile map_;
  std::map<std::string, std::string> metadata_;
};

// The file of one checkpoint's weights by its name: a torch.save archive (*.bin, *.pt, *.pth) or a
// .safetensors file (any other name).
std::unique_ptr<TensorFile> open_tensor_file(const std::string& path);  // throws Error

// A checkpoint folder or file: DIR/model.safetensors, DIR/model.safetensors.index.json + shards, and
// when the folder has neither, DIR/pytorch_model.bin or DIR/pytorch_model.bin.index.json + shards
// (torch.save archives, io/torch_checkpoint.h); or a direct path to one such file or index.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path);  // throws Error
  const TensorView* find(const std::string& name) const;    // nullptr if absent
  // Throws Error "<path>: tensor <name> not found" when absent.
  const TensorView& get(const std::string& name) const;
  std::vector<std::string> names() const;
  // The file that holds tensor `name` (Error as get() when absent), for messages.
  const std::string& file_of(const std::string& name) const;
  // Copies a tensor into fp32 (converting F32/BF16/F16), checking the shape; throws Error naming
  // the file, tensor, shape seen and shape expected.
  // out: (prod(expected_shape),) fp32, row-major.
  void read_f32(const std::string& name, const std::vector<int64_t>& expected_shape, float* out) const;
  // The same for elements [first, first + count) of the flattened tensor only (a rank copying its part
  // of a tensor touches only those pages of the mmap). out: (count,) fp32.
  void read_f32(const std::string& name, const std::vector<int64_t>& expected_shape, int64_t first, int64_t count,
                float* out) const;
  const std::string& path() const { return path_; }

 private:
  void add(const std::string& file);  // a tensor file or an index (*.index.json)
  void add_file(const std::string& file);
  void add_index(const std::string& index_path);

  std::string path_;
  std::vector<std::unique_ptr<TensorFile>> files_;
  std::map<std::string, std::pair<const TensorFile*, const TensorView*>> index_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // numel * dtype_size bytes, row-major, LE; nullptr when `read` gives them
  // The bytes [offset, offset + bytes) of the tensor into out (host memory), asked for in order and in
  // pieces of whole elements: a tensor whose data is not in host memory (a GPU's).
  std::function<void(void* out, size_t offset, size_t bytes)> read = {};
};

// Called with the bytes of each tensor once it is written or read (progress bars of long saves and loads).
using BytesDone = std::function<void(int64_t bytes)>;

// Writes one file atomically (PATH.tmp-XXXXXX, fsync, rename). metadata is written as __metadata__ (pass
// {{"format","pt"}} for Hugging Face). Throws Error on I/O failure (e.g. disk full).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata, const BytesDone& progress = {});
// The exact bytes write_safetensors would write (for tests and in-memory seeds).
std::vector<uint8_t> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                           const std::map<std::string, std::string>& metadata);

// Writes shards model-0000i-of-0000K.safetensors of at most max_shard_bytes each (HF rules) plus
// model.safetensors.index.json, or a single model.safetensors when everything fits in one shard.
void write_safetensors_sharded(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                               int64_t max_shard_bytes, const BytesDone& progress = {});

}  // namespace llamatrain::io
