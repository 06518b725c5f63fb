// Ctrl-C (SIGINT) or SIGTERM during `llamatrain preprocess` removes its temporary files (.bin/.idx
// temporaries and index spill files) and the process still ends by that signal, so shells and job
// runners see an interruption. The input is a FIFO the test keeps open, so the run is surely in the
// middle of writing when the signal arrives.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "test_util.h"

namespace llamatrain {
namespace {

using testing::TempDir;

void interrupt_preprocess(int sig) {
  TempDir dir;
  const std::string fifo = dir / "in.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string bin = testing::llamatrain_bin();
  const std::string prefix = dir / "out";
  const std::string model = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/data/fixtures/tokenizer.model";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(bin.c_str(), bin.c_str(), "preprocess", "--input", fifo.c_str(), "--tokenizer-model", model.c_str(),
            "--output-prefix", prefix.c_str(), "--quiet", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::FILE* w = std::fopen(fifo.c_str(), "w");  // blocks until the child opens it
  ASSERT_NE(w, nullptr);
  for (int i = 0; i < 3000; ++i) std::fprintf(w, "{\"text\": \"document %d\"}\n", i);
  std::fflush(w);
  bool started = false;
  for (int i = 0; i < 250 && !started; ++i) {
    started = !testing::temporaries_in(dir.path()).empty();
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(started) << "no temporary file appeared";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::fclose(w);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
  EXPECT_TRUE(testing::temporaries_in(dir.path()).empty()) << "left: " << testing::temporaries_in(dir.path()).front();
  for (const char* out : {"out_text_document.bin", "out_text_document.idx", "out.stats.json"})
    EXPECT_FALSE(std::filesystem::exists(dir / out)) << out;
}

TEST(Interrupt, CtrlCDuringPreprocessRemovesTemporaries) { interrupt_preprocess(SIGINT); }
TEST(Interrupt, SigtermDuringPreprocessRemovesTemporaries) { interrupt_preprocess(SIGTERM); }

}  // namespace
}  // namespace llamatrain
