// File I/O shared by every reader and writer: a read-only mapped file, a file committed atomically
// (PATH.tmp-XXXXXX, fsync, rename to PATH, fsync of the folder), a folder committed atomically
// (DIR.tmp-XXXXXX renamed to DIR), checks of output paths before long work, and std::filesystem
// failures turned into Error. Every failure is an Error naming the path and the system's reason.
// Temporaries are removed when their owner is destroyed uncommitted (an Error unwinding) and, through
// a registry read by a SIGINT/SIGTERM handler, when the user interrupts the program; a SIGKILL
// leaves them behind (only names ending in .tmp-XXXXXX, never a finished-looking file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llamatrain {

// A whole regular file mapped read-only. A 0-byte file maps to data() == nullptr.
class MappedFile {
 public:
  MappedFile() = default;
  // `what` names the file in messages ("safetensors file"); `hint` is appended when it can't be opened.
  explicit MappedFile(const std::string& path, const std::string& what = "file", const std::string& hint = "");
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // (size(),) bytes
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// A whole small regular file (a config or an index) read into memory; Error if larger than max_bytes.
std::string read_small_file(const std::string& path, size_t max_bytes, const std::string& what = "file");

// Writes PATH through PATH.tmp-XXXXXX in the same folder; commit() makes it PATH in one rename, so
// readers see the old file or the new one, never a part. Destroyed uncommitted, it removes the
// temporary and leaves any previous PATH untouched. A full disk is an Error naming PATH.
// direct: for large files (checkpoints), the bytes go to the disk with O_DIRECT through an aligned
// staging buffer, not through the page cache, whose copy and writeback throttling held writes to a
// fraction of the disk's rate; where the filesystem refuses O_DIRECT (tmpfs), it writes as usual. Two
// staging buffers: one is written to the disk by a thread while the caller fills the other, so the
// copy and the checksum overlap the disk's work.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path, bool direct = false);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes, fsyncs, renames the temporary to PATH and fsyncs the folder.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  void flush();
  void write_direct(const uint8_t* p, size_t n);

  std::string path_, temp_;
  int fd_ = -1;
  int registration_ = -1;
  std::vector<uint8_t> buffer_;  // pending bytes, flushed at 1 MiB
  uint64_t written_ = 0;
  bool committed_ = false;
  // O_DIRECT: the staging buffer being filled (kDirectBytes, 4 KiB aligned) and its pending bytes,
  // written whole (so every write's offset and size stay aligned) and, at commit, the tail without
  // O_DIRECT; the other buffer, which `in_flight_` may be writing; both in one allocation.
  uint8_t* staging_ = nullptr;
  uint8_t* direct_ = nullptr;
  uint8_t* other_ = nullptr;
  size_t direct_used_ = 0;
  std::future<void> in_flight_;
  void wait_in_flight();        // rethrows the write's error
  bool o_direct_ = false;       // the file is open with O_DIRECT
  std::vector<uint32_t> crcs_;  // direct mode: the CRC32C of each finished kWrittenCrcBlock block
  uint32_t crc_ = 0;            // and of the block being written, its bytes so far
  int64_t crc_bytes_ = 0;
  void write_staged(const uint8_t* p, size_t n);
  void drop_o_direct();  // writes go through the page cache from here on
};

// The CRC32C of each kWrittenCrcBlock-byte block of a file AtomicFile wrote in direct mode, computed
// from the bytes as they were written, by the file's final path: a checkpoint records its files'
// checksums without reading them back from the disk. Taken once (nullopt when not recorded, or when
// the file's size is not `size`); the record of the last few hundred such files is kept.
constexpr int64_t kWrittenCrcBlock = 64 << 20;
std::optional<std::vector<uint32_t>> take_written_crcs(const std::string& path, uint64_t size);

// AtomicFile for bytes already in memory.
void write_file_atomic(const std::string& path, std::string_view bytes);
void write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& chunks);

// Writes a folder DIR in full before it appears: files go into DIR.tmp-XXXXXX (file(name) gives
// their paths), commit() fsyncs them and renames the folder to DIR. An existing DIR is replaced
// only if it is empty or every entry matches one of `replaceable` (fnmatch patterns, e.g. the files
// of a previous export); otherwise the constructor throws, before any work is done.
class AtomicDir {
 public:
  AtomicDir(std::string dir, std::vector<std::string> replaceable);
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  const std::string& temp_path() const { return temp_; }
  std::string file(const std::string& name) const;  // temp_path()/name; the folder's files are removed with it
  void commit();
  const std::string& path() const { return dir_; }

 private:
  std::string dir_, temp_;
  std::vector<std::string> replaceable_;
  int registration_ = -1;
  bool committed_ = false;
};

// Before long work: the file PATH can be written (its folder exists and takes new files; PATH is not
// a folder). `what` names PATH in messages ("--output-prefix"). Throws Error with a hint.
void check_output_file(const std::string& path, const std::string& what);
// Before long work: the folder DIR can be written by AtomicDir(dir, replaceable): DIR is not a file,
// an existing DIR holds only replaceable entries, and its parent (created if missing) takes new folders.
void check_output_dir(const std::string& dir, const std::vector<std::string>& replaceable, const std::string& what);

// std::filesystem without exceptions: false on any error.
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
bool path_exists(const std::string& path);
// mkdir -p; Error naming the path and the reason.
void create_directories(const std::string& path);
// Removes a file or a folder tree if present; failures are ignored (cleanup paths).
void remove_quietly(const std::string& path);

// A std::filesystem error as a plain message: "<operation> <path>: <reason>".
std::string filesystem_error_message(const std::filesystem::filesystem_error& e);

// Temporaries the SIGINT/SIGTERM handler removes (files are unlinked, then each folder with the files
// directly in it; the folders AtomicDir makes hold no subfolders). register_temporary installs the handler on first use (not where the
// signal is ignored, e.g. under nohup) and returns a slot, or -1 when the path is too long or every
// slot is taken (the owner still removes it on failure).
int register_temporary(const std::string& path, bool is_folder);
// Installs that handler now rather than at the first registration. A program that handles SIGINT /
// SIGTERM itself (the trainer stops at a safe point, and unwinding removes temporaries) calls this
// before installing its own handler, so that a later registration cannot replace it.
void install_temporary_cleanup_handlers();
void unregister_temporary(int slot);

}  // namespace llamatrain
