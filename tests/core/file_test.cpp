// core/file: the mapped file's size and bytes and its errors (path and reason); atomic files (new,
// replacing, failure keeps the previous file, a full disk is an Error naming the file, on a real
// full tmpfs when one can be mounted and through a file-size limit otherwise); atomic folders (new,
// replacing a previous export, refusing a folder with other files, nothing left on failure); output
// checks; and the SIGINT/SIGTERM cleanup of registered temporaries in a child process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "test_util.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;

#define EXPECT_HAS(msg, sub) \
  EXPECT_NE((msg).find(sub), std::string::npos) << "missing \"" << (sub) << "\" in: " << (msg)

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(LLAMATRAIN_BINARY_DIR) + "/tmp_file_test_XXXXXX";
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  static std::string read(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  static void put(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  template <typename F>
  static std::string error_of(F f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  std::string dir_;
};

TEST_F(FileTest, MappedFileSizeBytesAndErrors) {
  put(path("a"), "hello");
  MappedFile m(path("a"));
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), m.size()), "hello");
  MappedFile moved = std::move(m);
  EXPECT_EQ(moved.size(), 5u);
  EXPECT_EQ(m.data(), nullptr);
  put(path("empty"), "");
  EXPECT_EQ(MappedFile(path("empty")).data(), nullptr);
  const std::string missing = error_of([&] { MappedFile x(path("nope"), "weights file", "check it"); });
  EXPECT_HAS(missing, "weights file " + path("nope"));
  EXPECT_HAS(missing, "No such file or directory");
  EXPECT_HAS(missing, "hint: check it");
  EXPECT_HAS(error_of([&] { MappedFile x(dir_); }), dir_ + " is a folder");
  EXPECT_HAS(error_of([&] { read_small_file(path("a"), 4, "config"); }), "expected a config of at most 4 bytes");
  EXPECT_EQ(read_small_file(path("a"), 5), "hello");
}

TEST_F(FileTest, AtomicFileCommitsAndReplaces) {
  write_file_atomic(path("f"), "one");
  EXPECT_EQ(read(path("f")), "one");
  {
    AtomicFile f(path("f"));
    f.write("two, ");
    std::string big(3 << 20, 'x');  // larger than the buffer: written straight through
    f.write(big);
    EXPECT_EQ(read(path("f")), "one");  // not visible before commit
    f.commit();
  }
  EXPECT_EQ(read(path("f")).size(), 5u + (3u << 20));
  EXPECT_EQ(entries(), std::vector<std::string>{"f"});
}

// Direct mode (O_DIRECT through an aligned staging buffer): the same bytes as a buffered write for
// pieces of any size, the tail past the last aligned block included, with the checksum of each
// 64 MiB block taken once by the file's path; on tmpfs, which refuses O_DIRECT, it writes as usual.
TEST_F(FileTest, DirectWritesTheSameBytesAndTheirBlockChecksums) {
  std::string bytes;
  for (size_t i = 0; bytes.size() < (kWrittenCrcBlock + (5 << 20) + 3); i++)
    bytes += std::string(1 + i * 7919 % 40000, char('a' + i % 26));  // pieces of awkward sizes
  auto write = [&](const std::string& at, bool direct, size_t length) {
    AtomicFile f(at, direct);
    for (size_t done = 0, i = 0; done < length; i++) {
      const size_t piece = std::min(length - done, size_t(1 + i * 104729 % (3 << 20)));
      f.write(bytes.data() + done, piece);
      done += piece;
    }
    f.commit();
  };
  const std::string tmpfs = path("tmpfs");
  fs::create_directories(tmpfs);
  const bool mounted = ::mount("tmpfs", tmpfs.c_str(), "tmpfs", 0, "size=160m") == 0;
  for (const size_t length : {size_t(0), size_t(1), size_t(4095), size_t(4096), size_t(16 << 20) + 7, bytes.size()}) {
    SCOPED_TRACE(length);
    for (const std::string& where : mounted ? std::vector<std::string>{dir_, tmpfs} : std::vector<std::string>{dir_}) {
      const std::string f = where + "/direct.bin";
      write(f, true, length);
      EXPECT_TRUE(read(f) == bytes.substr(0, length)) << f << ": the bytes differ";
      const auto crcs = take_written_crcs(f, length);
      ASSERT_TRUE(crcs.has_value()) << f;
      std::vector<uint32_t> want;
      for (size_t b = 0; b < length; b += size_t(kWrittenCrcBlock))
        want.push_back(crc32c(bytes.data() + b, std::min(length - b, size_t(kWrittenCrcBlock))));
      EXPECT_EQ(*crcs, want) << f;
      EXPECT_FALSE(take_written_crcs(f, length).has_value()) << "taken once";
    }
  }
  if (mounted) ::umount(tmpfs.c_str());
  write(path("plain.bin"), false, 100);
  EXPECT_FALSE(take_written_crcs(path("plain.bin"), 100).has_value()) << "recorded in direct mode only";
  write(path("sized.bin"), true, 100);
  EXPECT_FALSE(take_written_crcs(path("sized.bin"), 99).has_value()) << "a size that differs is no record";
  // A file written again under the same path before its record was taken: the newer bytes' record.
  write(path("again.bin"), true, 4096);
  std::reverse(bytes.begin(), bytes.begin() + 4096);
  write(path("again.bin"), true, 4096);
  EXPECT_EQ(take_written_crcs(path("again.bin"), 4096), std::vector<uint32_t>{crc32c(bytes.data(), 4096)});
}

TEST_F(FileTest, AtomicFileFailureKeepsThePreviousFile) {
  write_file_atomic(path("f"), "previous");
  try {
    AtomicFile f(path("f"));
    f.write("partial");
    throw Error("the writer failed");
  } catch (const Error&) {
  }
  EXPECT_EQ(read(path("f")), "previous");
  EXPECT_EQ(entries(), std::vector<std::string>{"f"});
  EXPECT_HAS(error_of([&] { AtomicFile f(path("no/such/dir/x")); }),
             "folder " + path("no/such/dir") + " does not exist");
  EXPECT_HAS(error_of([&] { AtomicFile f(dir_); }), "it is a folder");
}

TEST_F(FileTest, FileSizeLimitIsAnErrorNamingTheFile) {
  write_file_atomic(path("f"), "previous");
  std::string msg;
  {
    const testing::FileSizeLimit limit(4096);
    msg = error_of([&] { write_file_atomic(path("f"), std::string(1 << 20, 'y')); });
  }
  EXPECT_HAS(msg, "writing " + path("f") + " failed: File too large");
  EXPECT_HAS(msg, "hint: the disk is full");
  EXPECT_EQ(read(path("f")), "previous");
  EXPECT_EQ(entries(), std::vector<std::string>{"f"});
}

TEST_F(FileTest, FullDiskIsAnErrorNamingTheFileAndKeepsThePreviousOne) {
  const std::string mnt = path("small");
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN)";
  const std::string f = mnt + "/weights.bin";
  write_file_atomic(f, std::string(100 << 10, 'a'));
  const std::string msg = error_of([&] { write_file_atomic(f, std::string(200 << 10, 'b')); });
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(mnt)) left.push_back(e.path().filename().string());
  const std::string kept = read(f);
  ::umount(mnt.c_str());
  EXPECT_HAS(msg, "writing " + f + " failed: No space left on device");
  EXPECT_HAS(msg, "hint: the disk is full");
  EXPECT_EQ(kept, std::string(100 << 10, 'a'));
  EXPECT_EQ(left, std::vector<std::string>{"weights.bin"});
}

TEST_F(FileTest, AtomicDirCommitsReplacesAnExportAndRefusesOtherFolders) {
  const std::vector<std::string> exported = {"config.json", "model*.safetensors"};
  {
    AtomicDir d(path("out/nested"), exported);  // parents are created
    write_file_atomic(d.file("config.json"), "{1}");
    EXPECT_FALSE(fs::exists(path("out/nested")));
    d.commit();
  }
  EXPECT_EQ(read(path("out/nested/config.json")), "{1}");
  {
    AtomicDir d(path("out/nested"), exported);
    write_file_atomic(d.file("config.json"), "{2}");
    write_file_atomic(d.file("model.safetensors"), "w");
    d.commit();
  }
  EXPECT_EQ(read(path("out/nested/config.json")), "{2}");
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(path("out"))) out.push_back(e.path().filename().string());
  EXPECT_EQ(out, std::vector<std::string>{"nested"});  // no temporary or old folder left

  fs::create_directories(path("mine"));
  put(path("mine/notes.txt"), "keep");
  const std::string msg = error_of([&] { AtomicDir d(path("mine"), exported); });
  EXPECT_HAS(msg, "notes.txt");
  EXPECT_EQ(read(path("mine/notes.txt")), "keep");
  put(path("file"), "x");
  EXPECT_HAS(error_of([&] { AtomicDir d(path("file"), exported); }), "is a file, expected a folder");
}

TEST_F(FileTest, AtomicDirFailureLeavesNothing) {
  try {
    AtomicDir d(path("out"), {"*"});
    write_file_atomic(d.file("a"), "1");
    throw Error("the export failed");
  } catch (const Error&) {
  }
  EXPECT_TRUE(entries().empty());
}

TEST_F(FileTest, OutputChecks) {
  EXPECT_NO_THROW(check_output_file(path("x.stats.json"), "--output-prefix"));
  EXPECT_TRUE(entries().empty());  // the probe leaves nothing
  EXPECT_HAS(error_of([&] { check_output_file(path("no/x"), "--output-prefix"); }), "does not exist");
  EXPECT_HAS(error_of([&] { check_output_file(dir_, "--out"); }), "is a folder");
  EXPECT_NO_THROW(check_output_dir(path("new/dir"), {}, "--export"));
  EXPECT_TRUE(fs::is_directory(path("new")));  // the parent is made; the folder itself is not
  EXPECT_FALSE(fs::exists(path("new/dir")));
}

// A child registers temporaries, then gets the signal: they are gone and it died by that signal.
void signal_cleans(int sig) {
  const std::string dir = std::string(LLAMATRAIN_BINARY_DIR) + "/tmp_file_signal_XXXXXX";
  std::string d = dir;
  ASSERT_NE(::mkdtemp(d.data()), nullptr);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    AtomicFile f(d + "/file");
    f.write("x");
    AtomicDir folder(d + "/export", {"*"});
    write_file_atomic(folder.file("config.json"), "{}");
    ::raise(sig);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(d)) left.push_back(e.path().filename().string());
  fs::remove_all(d);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
  EXPECT_TRUE(left.empty()) << "left " << left.front();
}

TEST(FileSignals, SigintRemovesTemporaries) { signal_cleans(SIGINT); }
TEST(FileSignals, SigtermRemovesTemporaries) { signal_cleans(SIGTERM); }

}  // namespace
}  // namespace llamatrain
