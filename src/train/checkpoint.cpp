// Checkpoint folders: list, verify, prune, and the folder format's checksums (checkpoint_format.h);
// see checkpoint.h. A save (checkpoint_save.cpp) is one AtomicDir (core/file.h): every file is written
// into step_N.tmp-XXXXXX next to the final folder, fsynced, and the folder is renamed into place (then
// the parent fsynced): the rename is the commit point. A load (checkpoint_load.cpp) reshards.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "io/safetensors.h"
#include "train/checkpoint_format.h"

namespace llamatrain::train {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_format;

namespace checkpoint_format {

namespace {

// CRC32C of each kCrcBlock-byte block of a file, blocks computed in parallel. Read with pread in
// pieces of kCrcPiece bytes, not mapped: a mapping's pages count in the process's resident memory
// (and in a SLURM job's memory limit) until it is unmapped, so checking a 100 GB checkpoint would
// need 100 GB of room; this needs kCrcPiece per thread.
constexpr size_t kCrcPiece = 4 << 20;

}  // namespace

std::vector<uint32_t> block_crcs(const fs::path& p, int64_t* size_out, const io::BytesDone& progress) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", p.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot stat {}: {}", p.string(), std::strerror(e));
  }
  const int64_t size = st.st_size;
  *size_out = size;
  std::vector<uint32_t> crcs(size_t((size + kCrcBlock - 1) / kCrcBlock));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  const int64_t n = int64_t(crcs.size());
  std::string error;  // the first failure (an exception may not leave the parallel region)
#pragma omp parallel
  {
    std::vector<uint8_t> piece(kCrcPiece);
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < n; b++) {
      const int64_t begin = b * kCrcBlock, len = std::min(kCrcBlock, size - begin);
      uint32_t crc = 0;
      for (int64_t at = 0; at < len;) {
        const ssize_t got =
            ::pread(fd, piece.data(), size_t(std::min<int64_t>(int64_t(kCrcPiece), len - at)), begin + at);
        if (got <= 0) {
          const std::string why = got < 0 ? std::strerror(errno) : "the file ended early (truncated while read?)";
#pragma omp critical(checkpoint_crc_error)
          if (error.empty()) error = fmt::format("cannot read {} at byte {}: {}", p.string(), begin + at, why);
          break;
        }
        crc = crc32c(piece.data(), size_t(got), crc);
        at += got;
      }
      crcs[size_t(b)] = crc;
      if (progress) {
#pragma omp critical(checkpoint_progress)
        progress(len);
      }
    }
  }
  ::close(fd);
  if (!error.empty()) fail("{}", error);
  return crcs;
}

json file_record(const fs::path& p) {
  std::error_code ec;
  int64_t size = int64_t(fs::file_size(p, ec));
  std::optional<std::vector<uint32_t>> written;
  if (!ec) written = take_written_crcs(p.string(), uint64_t(size));
  const auto crcs = written ? std::move(*written) : block_crcs(p, &size);
  return json{{"bytes", size}, {"crc32c_block_bytes", kCrcBlock}, {"crc32c", crcs}};
}

int64_t step_of(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5 || name.size() > 5 + 18) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); i++) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

bool is_optimizer_file(const std::string& name) {
  return name.rfind("optimizer", 0) == 0 && name.ends_with(".safetensors");
}

bool is_leftover(const std::string& name) {
  return name.rfind("step_", 0) == 0 &&
         (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos);
}

json read_json(const fs::path& p) {
  const std::string text = read_small_file(p.string(), 64 << 20, "checkpoint state");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}\nhint: the checkpoint is damaged; an older one will be used", p.string(), e.what());
  }
}

}  // namespace checkpoint_format

std::vector<CheckpointInfo> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step < 0 || !fs::is_directory(e.path(), ec)) continue;
    if (!fs::exists(e.path() / kStateFile, ec)) continue;
    out.push_back({e.path().string(), step});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

int64_t checkpoint_file_bytes(const std::string& path) {
  try {
    const json st = read_json(fs::path(path) / kStateFile);
    int64_t total = 0;
    for (const auto& [name, rec] : st.at("files").items()) total += rec.value("bytes", int64_t(0));
    return total;
  } catch (const std::exception&) {
    return 0;
  }
}

std::string verify_checkpoint(const std::string& path, const io::BytesDone& progress) {
  const fs::path dir(path);
  json st;
  try {
    st = read_json(dir / kStateFile);
  } catch (const Error& e) {
    return e.what();
  }
  if (st.value("format", "") != kFormat || !st.contains("files") || !st["files"].is_object())
    return fmt::format("{}: not a llamatrain checkpoint state (format or files missing)", (dir / kStateFile).string());
  if (st.value("version", 0) > kVersion)
    return fmt::format("{}: written by a newer llamatrain (checkpoint version {}, this one reads {})",
                       (dir / kStateFile).string(), st.value("version", 0), kVersion);
  for (const auto& [name, rec] : st["files"].items()) {
    const fs::path p = dir / name;
    std::error_code ec;
    if (!fs::exists(p, ec)) return fmt::format("{}: missing", p.string());
    try {
      int64_t size = 0;
      const auto crcs = block_crcs(p, &size, progress);
      if (size != rec.value("bytes", int64_t(-1)))
        return fmt::format("{}: {} bytes, expected {} (truncated or overwritten)", p.string(), size,
                           rec.value("bytes", int64_t(-1)));
      if (rec.value("crc32c_block_bytes", int64_t(0)) != kCrcBlock ||
          crcs != rec.value("crc32c", std::vector<uint32_t>{}))
        return fmt::format("{}: checksum mismatch (the file's content changed after it was saved)", p.string());
    } catch (const Error& e) {
      return e.what();
    }
  }
  if (!st["files"].contains("config.json")) return fmt::format("{}: incomplete, config.json is not listed", path);
  bool moments = false;
  for (const auto& [name, rec] : st["files"].items()) moments |= is_optimizer_file(name);
  if (!moments) return fmt::format("{}: incomplete, no optimizer*.safetensors is listed", path);
  return "";
}

std::optional<CheckpointInfo> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                      std::vector<std::string>* warnings) {
  auto all = list_checkpoints(checkpoints_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string why = verify_checkpoint(it->path);
    if (why.empty()) return *it;
    if (warnings) warnings->push_back(fmt::format("skipping checkpoint {}: {}", it->path, why));
  }
  return std::nullopt;
}

std::string all_checkpoints_damaged(const std::string& checkpoints_dir, const std::vector<std::string>& damaged) {
  return fmt::format(
      "exp_manager.resume_if_exists: every checkpoint in {} is damaged ({}), and starting again from step 0 would "
      "lose the run:\n  {}\nhint: repair or restore one (model.resume_from_checkpoint=PATH resumes from a copy kept "
      "elsewhere); to start over from step 0 instead, move them out of {} or set exp_manager.resume_if_exists=false",
      checkpoints_dir, damaged.size(), fmt::join(damaged, "\n  "), checkpoints_dir);
}

int64_t checkpoint_disk_bytes(const model::LlamaConfig& c, model::Precision p) {
  return c.num_params() * 3 * (p == model::Precision::bf16_sr ? 2 : 4);  // weights and the two moments
}

std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int keep) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec))
    if (is_leftover(e.path().filename().string())) {
      fs::remove_all(e.path(), ec);
      removed.push_back(e.path().string());
    }
  if (keep <= 0) return removed;
  auto all = list_checkpoints(checkpoints_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); i++) {
    fs::remove_all(all[i].path, ec);
    if (ec) fail("cannot remove old checkpoint {}: {}", all[i].path, ec.message());
    removed.push_back(all[i].path);
  }
  return removed;
}

}  // namespace llamatrain::train
