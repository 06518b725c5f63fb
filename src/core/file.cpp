// File module (core/file.h): mmap, atomic files and folders, output checks, the temporary registry
// and its SIGINT/SIGTERM handler. The handler only calls async-signal-safe functions (unlink, rmdir,
// write, sigaction, raise) on paths stored in fixed slots, then re-raises the signal with the
// previous disposition so the exit status still says "interrupted".
#include "core/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include "core/crc32c.h"
#include "core/error.h"

namespace llamatrain {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// "out/" and "out" name the same folder; parent_path() of "out/" would be "out".
std::string without_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string parent_of(const std::string& path) {
  const std::string parent = fs::path(without_trailing_slashes(path)).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Six random characters for temporary names (O_EXCL / mkdir retry on a collision).
std::string random_suffix() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 gen{std::random_device{}() ^ (uint64_t(::getpid()) << 32)};
  std::string s(6, 'x');
  for (char& c : s) c = kChars[gen() % 36];
  return s;
}

const char* kDiskFullHint = "hint: the disk is full (or a quota or file-size limit is reached): free space or choose "
                            "another folder; a previous file of that name is left as it was";

std::string write_failure(const std::string& path, int e) {
  std::string msg = fmt::format("writing {} failed: {}", path, errno_text(e));
  if (e == ENOSPC || e == EDQUOT || e == EFBIG) return msg + "\n" + kDiskFullHint;
  return msg + "\nhint: check the folder's permissions and free space";
}

[[noreturn]] void fail_write(const std::string& path, int e) {
  throw Error(write_failure(path, e), e == ENOSPC || e == EDQUOT || e == EFBIG ? "disk_full" : "");
}

void fsync_folder(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: some file systems refuse fsync on folders
  ::close(fd);
}

// ---- registry of temporaries, read by the signal handler ----

constexpr int kSlots = 256;
enum SlotState : int { kFree = 0, kBusy = 1, kFile = 2, kFolder = 3 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX];
};
Slot g_slots[kSlots];
struct sigaction g_previous[2];
std::once_flag g_install_once;

int signal_index(int sig) { return sig == SIGINT ? 0 : 1; }

// Unlinks every entry of a (flat) folder with raw getdents64, which, unlike readdir, is safe in a
// signal handler, then removes the folder.
bool remove_folder_in_handler(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  alignas(8) static char buf[16384];
  while (true) {
    const long n = ::syscall(SYS_getdents64, fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const struct dirent64*>(buf + off);
      if (std::strcmp(d->d_name, ".") != 0 && std::strcmp(d->d_name, "..") != 0) ::unlinkat(fd, d->d_name, 0);
      off += d->d_reclen;
    }
  }
  ::close(fd);
  return ::rmdir(path) == 0;
}

void remove_temporaries_on_signal(int sig) {
  bool removed = false;
  for (int pass : {kFile, kFolder})
    for (Slot& s : g_slots)
      if (s.state.load(std::memory_order_acquire) == pass)
        removed |= pass == kFile ? ::unlink(s.path) == 0 : remove_folder_in_handler(s.path);
  if (removed) {
    static const char kNote[] = "\ninterrupted: temporary files removed\n";
    ssize_t ignored = ::write(2, kNote, sizeof(kNote) - 1);
    (void)ignored;
  }
  ::sigaction(sig, &g_previous[signal_index(sig)], nullptr);
  ::raise(sig);
}

void install_handlers() {
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    g_previous[signal_index(sig)] = old;
    if (old.sa_handler == SIG_IGN) continue;  // nohup, background jobs: the user asked not to be interrupted
    struct sigaction sa {};
    sa.sa_handler = remove_temporaries_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    ::sigaction(sig, &sa, nullptr);
  }
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns)
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return false;
}

// Entries of a folder that no pattern allows (at most 3, for the message), or an Error if unreadable.
std::vector<std::string> foreign_entries(const std::string& dir, const std::vector<std::string>& replaceable,
                                         bool* empty) {
  std::vector<std::string> foreign;
  *empty = true;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    *empty = false;
    const std::string name = it->path().filename().string();
    bool regular = it->is_regular_file(ec);
    if (ec) break;
    if ((!regular || !matches_any(name, replaceable)) && foreign.size() < 3) foreign.push_back(name);
  }
  if (ec) fail("cannot list folder {}: {}\nhint: check its permissions", dir, ec.message());
  return foreign;
}

std::string probe_failure(const std::string& what, const std::string& path, const std::string& folder, int e) {
  return fmt::format("{} {}: cannot create files in {}: {}\nhint: choose a folder you can write to{}", what, path,
                     folder, errno_text(e), e == ENOSPC ? " (this one is full)" : "");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MappedFile

MappedFile::MappedFile(const std::string& path, const std::string& what, const std::string& hint) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    fail("cannot open {} {}: {}{}{}", what, path, errno_text(e), hint.empty() ? "" : "\nhint: ", hint);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot read {} {}: {}", what, path, errno_text(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{} is {}, expected a regular file ({}){}{}", path, S_ISDIR(st.st_mode) ? "a folder" : "not a regular file",
         what, hint.empty() ? "" : "\nhint: ", hint);
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    if (p == MAP_FAILED) {
      ::close(fd);
      fail("cannot map {} {} ({} bytes) into memory: {}\nhint: check free memory and the address-space limit "
           "(ulimit -v)",
           what, path, size_, errno_text(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

std::string read_small_file(const std::string& path, size_t max_bytes, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    fail("cannot open {} {}: {}\nhint: check the path", what, path, errno_text(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    fail("{} is {}, expected a regular file ({})", path, dir ? "a folder" : "not a regular file", what);
  }
  if (uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    fail("{}: file is {} bytes, expected a {} of at most {} bytes\nhint: check the path", path, st.st_size, what,
         max_bytes);
  }
  std::string out(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = r < 0 ? errno : 0;
      ::close(fd);
      if (r < 0) fail("cannot read {} {}: {}", what, path, errno_text(e));
      out.resize(got);  // the file shrank while we read it
      return out;
    }
    got += size_t(r);
  }
  ::close(fd);
  return out;
}

// ---------------------------------------------------------------------------------------------
// AtomicFile

namespace {
constexpr size_t kDirectAlign = 4096, kDirectBytes = 16 << 20;
}

AtomicFile::AtomicFile(std::string path, bool direct) : path_(std::move(path)) {
  if (is_directory(path_))
    fail("cannot write {}: it is a folder, expected a file name\nhint: choose another name", path_);
  const std::string folder = parent_of(path_);
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temp_ = path_ + ".tmp-" + random_suffix();
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct ? O_DIRECT : 0), 0666);
    if (fd_ < 0 && direct && errno == EINVAL) {  // no O_DIRECT on this filesystem
      direct = false;
      fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    }
    if (fd_ >= 0) break;
    const int e = errno;
    if (e == EEXIST && attempt < 100) continue;
    if (e == ENOENT && !is_directory(folder))
      fail("cannot create {}: folder {} does not exist\nhint: create it first (mkdir -p {})", path_, folder, folder);
    fail_as(e == ENOSPC || e == EDQUOT ? "disk_full" : "",
            "cannot create {} (as {}): {}\nhint: check that the folder {} is writable and has free space", path_, temp_,
            errno_text(e), folder);
  }
  registration_ = register_temporary(temp_, false);
  o_direct_ = direct;
  if (direct) staging_ = static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, 2 * kDirectBytes));
  if (direct && !staging_) drop_o_direct();
  if (staging_) direct_ = staging_, other_ = staging_ + kDirectBytes;
}

AtomicFile::~AtomicFile() {
  if (in_flight_.valid()) {
    try {
      in_flight_.get();
    } catch (...) {  // (the file is abandoned: its error no longer matters)
    }
  }
  std::free(staging_);
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
  unregister_temporary(registration_);
}

void AtomicFile::drop_o_direct() {
  if (!o_direct_) return;
  o_direct_ = false;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT);
}

void AtomicFile::write_direct(const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd_, p, std::min(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && o_direct_) {  // O_DIRECT refused for this write: write as usual
      drop_o_direct();
      continue;
    }
    if (w <= 0) fail_write(path_, w < 0 ? errno : ENOSPC);
    p += w;
    n -= size_t(w);
  }
}

void AtomicFile::flush() {
  write_direct(buffer_.data(), buffer_.size());
  buffer_.clear();
}

namespace {

struct WrittenCrcs {
  std::string path;
  uint64_t size;
  std::vector<uint32_t> crcs;
};
std::mutex g_written_mutex;
std::vector<WrittenCrcs> g_written;  // oldest first, at most kWrittenKept

constexpr size_t kWrittenKept = 256;

}  // namespace

std::optional<std::vector<uint32_t>> take_written_crcs(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> lock(g_written_mutex);
  for (auto it = g_written.begin(); it != g_written.end(); ++it)
    if (it->path == path) {
      std::optional<std::vector<uint32_t>> out;
      if (it->size == size) out = std::move(it->crcs);
      g_written.erase(it);
      return out;
    }
  return std::nullopt;
}

// O_DIRECT: through the staging buffer, written whenever it is full; the blocks' checksums taken
// from the staged bytes (kDirectBytes divides kWrittenCrcBlock, so a piece never spans two blocks).
void AtomicFile::write_staged(const uint8_t* p, size_t n) {
  static_assert(kWrittenCrcBlock % kDirectBytes == 0);
  while (n > 0) {
    const size_t take = std::min(n, kDirectBytes - direct_used_);
    std::memcpy(direct_ + direct_used_, p, take);
    crc_ = crc32c(direct_ + direct_used_, take, crc_);
    crc_bytes_ += int64_t(take);
    if (crc_bytes_ == kWrittenCrcBlock) crcs_.push_back(crc_), crc_ = 0, crc_bytes_ = 0;
    direct_used_ += take, p += take, n -= take;
    if (direct_used_ == kDirectBytes) {  // to the disk behind the next buffer's filling
      wait_in_flight();
      in_flight_ = std::async(std::launch::async, [this, full = direct_] { write_direct(full, kDirectBytes); });
      std::swap(direct_, other_);
      direct_used_ = 0;
    }
  }
}

void AtomicFile::wait_in_flight() {
  if (in_flight_.valid()) in_flight_.get();
}

void AtomicFile::write(const void* data, size_t n) {
  CHECK(!committed_ && fd_ >= 0, "write to {} after commit", path_);
  constexpr size_t kBufferBytes = 1 << 20;
  const auto* p = static_cast<const uint8_t*>(data);
  written_ += n;
  if (direct_) return write_staged(p, n);
  if (buffer_.size() + n > kBufferBytes) flush();
  if (n >= kBufferBytes) {
    write_direct(p, n);  // large blocks (tensors) go straight to the file
    return;
  }
  buffer_.insert(buffer_.end(), p, p + n);
}

void AtomicFile::commit() {
  CHECK(!committed_ && fd_ >= 0, "{} committed twice", path_);
  wait_in_flight();
  if (direct_) {  // the aligned part of what is staged with O_DIRECT, the tail as usual
    const size_t aligned = direct_used_ / kDirectAlign * kDirectAlign;
    write_direct(direct_, aligned);
    drop_o_direct();
    write_direct(direct_ + aligned, direct_used_ - aligned);
    direct_used_ = 0;
    if (crc_bytes_ > 0) crcs_.push_back(crc_);
  }
  flush();
  if (::fsync(fd_) != 0) fail_write(path_, errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail_write(path_, errno);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    fail("cannot rename {} to {}: {}\nhint: check the permissions of the folder", temp_, path_, errno_text(e));
  }
  committed_ = true;
  unregister_temporary(registration_);
  registration_ = -1;
  fsync_folder(parent_of(path_));
  if (direct_) {
    std::lock_guard<std::mutex> lock(g_written_mutex);
    std::erase_if(g_written, [&](const WrittenCrcs& w) { return w.path == path_; });  // an older file's
    if (g_written.size() >= kWrittenKept) g_written.erase(g_written.begin());
    g_written.push_back({path_, written_, std::move(crcs_)});
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void write_file_atomic(const std::string& path, const std::vector<std::span<const uint8_t>>& chunks) {
  AtomicFile f(path);
  for (const auto& c : chunks) f.write(c.data(), c.size());
  f.commit();
}

// ---------------------------------------------------------------------------------------------
// AtomicDir

AtomicDir::AtomicDir(std::string dir, std::vector<std::string> replaceable)
    : dir_(without_trailing_slashes(std::move(dir))), replaceable_(std::move(replaceable)) {
  check_output_dir(dir_, replaceable_, "output folder");
  for (int attempt = 0;; ++attempt) {
    temp_ = dir_ + ".tmp-" + random_suffix();
    if (::mkdir(temp_.c_str(), 0777) == 0) break;
    const int e = errno;
    if (e == EEXIST && attempt < 100) continue;
    fail("{}", probe_failure("output folder", dir_, parent_of(dir_), e));
  }
  registration_ = register_temporary(temp_, true);
}

AtomicDir::~AtomicDir() {
  if (!committed_) remove_quietly(temp_);
  unregister_temporary(registration_);
}

std::string AtomicDir::file(const std::string& name) const { return temp_ + "/" + name; }

void AtomicDir::commit() {
  CHECK(!committed_, "{} committed twice", dir_);
  std::error_code ec;
  for (auto it = fs::directory_iterator(temp_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const int rc = ::fsync(fd);
    const int e = errno;
    ::close(fd);
    if (rc != 0) fail_write(it->path().string(), e);
  }
  fsync_folder(temp_);

  bool empty = true;
  const bool exists = is_directory(dir_);
  if (exists) {
    auto foreign = foreign_entries(dir_, replaceable_, &empty);
    if (!foreign.empty())
      fail("output folder {} now holds {}, which this program did not write; the new files are in {}\nhint: move "
           "them where you want them",
           dir_, foreign[0], temp_);
  }
  if (!exists || empty) {
    if (::rename(temp_.c_str(), dir_.c_str()) != 0) {
      const int e = errno;
      fail("cannot rename {} to {}: {}", temp_, dir_, errno_text(e));
    }
  } else if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) == 0) {
    remove_quietly(temp_);  // now holds the previous contents
  } else {
    // No atomic exchange on this file system: move the old folder aside, then the new one in.
    const std::string old = dir_ + ".old-" + random_suffix();
    if (::rename(dir_.c_str(), old.c_str()) != 0) {
      const int e = errno;
      fail("cannot move the previous {} aside to {}: {}", dir_, old, errno_text(e));
    }
    if (::rename(temp_.c_str(), dir_.c_str()) != 0) {
      const int e = errno;
      ::rename(old.c_str(), dir_.c_str());
      fail("cannot rename {} to {}: {}", temp_, dir_, errno_text(e));
    }
    remove_quietly(old);
  }
  committed_ = true;
  unregister_temporary(registration_);
  registration_ = -1;
  fsync_folder(parent_of(dir_));
}

// ---------------------------------------------------------------------------------------------
// Output checks

void check_output_file(const std::string& path, const std::string& what) {
  if (path.empty()) fail("{} is empty, expected a file path", what);
  if (is_directory(path))
    fail("{} {} is a folder, expected a file name\nhint: choose a name inside it, e.g. {}/out", what, path,
         without_trailing_slashes(path));
  const std::string folder = parent_of(path);
  if (!path_exists(folder))
    fail("{} {}: folder {} does not exist\nhint: create it first (mkdir -p {})", what, path, folder, folder);
  if (!is_directory(folder)) fail("{} {}: {} is not a folder, expected the folder of the output", what, path, folder);
  for (int attempt = 0;; ++attempt) {
    const std::string probe = path + ".tmp-" + random_suffix();
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(probe.c_str());
      return;
    }
    const int e = errno;
    if (e == EEXIST && attempt < 100) continue;
    fail("{}", probe_failure(what, path, folder, e));
  }
}

void check_output_dir(const std::string& dir_in, const std::vector<std::string>& replaceable, const std::string& what) {
  if (dir_in.empty()) fail("{} is empty, expected a folder path", what);
  const std::string dir = without_trailing_slashes(dir_in);
  if (path_exists(dir) && !is_directory(dir))
    fail("{} {} is a file, expected a folder\nhint: choose another name, or remove the file", what, dir);
  if (is_directory(dir)) {
    bool empty = true;
    auto foreign = foreign_entries(dir, replaceable, &empty);
    if (!foreign.empty())
      fail("{} {} already exists and holds {}{}, expected a new folder, an empty one or a previous export\n"
           "hint: choose another folder (it is created), or empty this one",
           what, dir, fmt::join(foreign, ", "), foreign.size() == 3 ? ", ..." : "");
  }
  const std::string parent = parent_of(dir);
  if (path_exists(parent) && !is_directory(parent)) fail("{} {}: {} is a file, expected a folder", what, dir, parent);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec)
    fail("{} {}: cannot create folder {}: {}\nhint: choose a folder you can write to", what, dir, parent, ec.message());
  for (int attempt = 0;; ++attempt) {
    const std::string probe = dir + ".tmp-" + random_suffix();
    if (::mkdir(probe.c_str(), 0777) == 0) {
      ::rmdir(probe.c_str());
      return;
    }
    const int e = errno;
    if (e == EEXIST && attempt < 100) continue;
    fail("{}", probe_failure(what, dir, parent, e));
  }
}

// ---------------------------------------------------------------------------------------------
// std::filesystem without exceptions

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

bool path_exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

void create_directories(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) fail("cannot create folder {}: {}\nhint: choose a folder you can write to", path, ec.message());
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::string filesystem_error_message(const fs::filesystem_error& e) {
  std::string msg = e.what();
  const std::string prefix = "filesystem error: ";
  if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
  return msg;
}

// ---------------------------------------------------------------------------------------------
// Registry

void install_temporary_cleanup_handlers() { std::call_once(g_install_once, install_handlers); }

int register_temporary(const std::string& path, bool is_folder) {
  if (path.size() >= PATH_MAX) return -1;
  std::call_once(g_install_once, install_handlers);
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kBusy, std::memory_order_acq_rel)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(is_folder ? kFolder : kFile, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(kFree, std::memory_order_release);
}

}  // namespace llamatrain
