// PyTorch checkpoints (pytorch_model.bin, docs/formats.md §4.5): the zip archive torch.save writes
// (PyTorch >= 1.6), read in place. The zip's entries are stored, not compressed, so each tensor is a
// TensorView into the mmap; ARCHIVE/data.pkl is read by a pickle interpreter that executes nothing: it
// knows the opcodes and the few globals a state dict is built from (OrderedDict, _rebuild_tensor_v2,
// the storage classes) and refuses any other global (os.system, a class) with an Error naming it.
// Left out: the legacy non-zip format (before 1.6, or _use_new_zipfile_serialization=False), TorchScript
// archives, compressed entries and non-contiguous tensors (each refused by name, with the fix).
#pragma once

#include <string>

#include "core/file.h"
#include "io/safetensors.h"

namespace llamatrain::io {

// True for the names torch.save's files go by: *.bin, *.pt, *.pth.
bool is_torch_file_name(const std::string& path);

// One mmapped torch.save archive holding a state dict: a dict of names to tensors, at the top level or
// under "state_dict", "model" or "module" (the other entries of that outer dict are ignored). Tensors
// of F32, F16, BF16 and the integer and bool types, row-major; several may share a storage (tied
// weights). Every failure throws Error naming the file and what is wrong.
class TorchFile : public TensorFile {
 public:
  explicit TorchFile(const std::string& path);  // throws Error
  ~TorchFile() override;

 private:
  MappedFile map_;
};

}  // namespace llamatrain::io
