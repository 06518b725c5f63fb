// The checkpoint folder's own format, shared by its writer (checkpoint_save.cpp), its reader
// (checkpoint_load.cpp) and the folder tools (checkpoint.cpp: list, verify, prune): file names, the
// format's name and version, and each file's size and block checksums. Internal to train/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/file.h"
#include "io/safetensors.h"

namespace llamatrain::train::checkpoint_format {

inline constexpr const char* kStateFile = "trainer_state.json";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kFormat = "llamatrain-checkpoint";
inline constexpr int kVersion = 1;
inline constexpr int64_t kCrcBlock = kWrittenCrcBlock;  // the blocks AtomicFile checksums as it writes

// CRC32C of each kCrcBlock-byte block of a file (its size in *size_out), computed in parallel in
// bounded memory.
std::vector<uint32_t> block_crcs(const std::filesystem::path& p, int64_t* size_out, const io::BytesDone& progress = {});
// A file's size and block checksums: those its writer computed as it wrote (large files), else read.
nlohmann::json file_record(const std::filesystem::path& p);
// N of a folder named step_N; -1 for any other name.
int64_t step_of(const std::string& name);
// optimizer*.safetensors: one of a save's optimizer files.
bool is_optimizer_file(const std::string& name);
// What an interrupted save leaves: AtomicDir temporaries "step_N.tmp-XXXXXX" (and "step_N.old-XXXXXX").
bool is_leftover(const std::string& name);
// A checkpoint's JSON file, or an error that says the checkpoint is damaged.
nlohmann::json read_json(const std::filesystem::path& p);

}  // namespace llamatrain::train::checkpoint_format
