// Validation under data, tensor and pipeline parallelism against one process, through the llamatrain
// binary under mpirun on the tiny config: val_loss, val_bits_per_byte and val_bits_per_char agree to
// 1e-5 and the counts of scored targets, bytes and characters are the same, so the byte counts are
// reduced over ranks as the loss is (summed over data-parallel ranks, taken from the pipeline's last
// stage, counted once per tensor-parallel group). The vocabulary is padded to a multiple of 16 in
// every run, so all layouts hold the same model.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "obs/metrics.h"
#include "obs/report.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

using testing::TempDir;

// The fixture corpus cut in two (its first documents, the rest), each preprocessed: two sources of a blend.
std::vector<std::string> two_sources(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<std::string> lines;
  std::istringstream in(testing::read_file(testing::fixture("corpus.jsonl")));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  std::vector<std::string> prefixes;
  for (const auto& [name, begin, end] :
       {std::tuple{"first", size_t{0}, lines.size() / 2}, std::tuple{"second", lines.size() / 2, lines.size()}}) {
    std::string text;
    for (size_t i = begin; i < end; i++) text += lines[i] + "\n";
    testing::write_file(dir + "/" + name + ".jsonl", text);
    std::string out;
    EXPECT_EQ(testing::run_capture(
                  fmt::format("{} preprocess --quiet --input {}/{}.jsonl --tokenizer-model {} "
                              "--output-prefix {}/{} --append-eod",
                              testing::llamatrain_bin(), dir, name, testing::fixture("tokenizer.model"), dir, name),
                  &out),
              0)
        << out;
    prefixes.push_back(dir + "/" + name + "_text_document");
  }
  return prefixes;
}

// The validation record of step 2 in a run's metrics.jsonl.
std::map<std::string, double> validation_at_2(const std::string& log_dir) {
  std::map<std::string, double> out;
  for (const auto& r : obs::read_metrics(log_dir + "/metrics.jsonl"))
    if (r.contains("val_loss") && r["step"].get<int64_t>() == 2)
      for (const auto& [key, v] : r.items())
        if (v.is_number()) out[key] = v.get<double>();
  return out;
}

TEST(ValidationLayout, BitsPerByteOfEveryLayoutEqualOneProcess) {
  TempDir dir;
  const std::vector<std::string> common = {"model.make_vocab_size_divisible_by=16", "trainer.max_steps=2",
                                           "model.optim.sched.warmup_steps=1", "trainer.val_check_interval=2",
                                           "trainer.limit_val_batches=2"};
  auto run = [&](int ranks, const std::string& name, std::vector<std::string> layout) {
    layout.insert(layout.end(), common.begin(), common.end());
    const auto r = testing::run_in(dir / name, testing::mpi_train_argv(MPIEXEC, ranks, dir / name, layout));
    EXPECT_EQ(r.status, 0) << r.log;
    return validation_at_2(dir / name);
  };
  const auto one = run(0, "one", {});
  ASSERT_TRUE(one.contains("val_bits_per_byte")) << "no validation record with bits per byte";
  EXPECT_EQ(one.at("val_tokens"), 2.0 * 8 * 64);
  struct Layout {
    int dp, tp, pp;
  };
  for (const Layout l : {Layout{2, 1, 2}, Layout{1, 2, 1}}) {
    const std::string name = fmt::format("dp{}_tp{}_pp{}", l.dp, l.tp, l.pp);
    SCOPED_TRACE(name);
    std::vector<std::string> layout = {"model.tensor_model_parallel_size=" + std::to_string(l.tp),
                                       "model.pipeline_model_parallel_size=" + std::to_string(l.pp)};
    if (l.tp > 1) layout.push_back("model.sequence_parallel=true");
    const auto got = run(l.dp * l.tp * l.pp, name, layout);
    ASSERT_TRUE(got.contains("val_bits_per_byte")) << name;
    for (const char* key : {"val_tokens", "val_bytes", "val_chars"}) EXPECT_EQ(got.at(key), one.at(key)) << key;
    for (const char* key : {"val_loss", "val_bits_per_byte", "val_bits_per_char"})
      EXPECT_NEAR(got.at(key), one.at(key), 1e-5 * one.at(key)) << key;
  }
}

// A 70/30 blend of two sources, the first named "zh" in data_prefix (zh:PREFIX), the second named from
// its file: validation reports each source's figures over its sequences of the
// same batches beside the blend's (metrics.jsonl, the @event line, TensorBoard, report), they add up to
// the blend's, they equal a PyTorch float64 forward of the exported weights on exactly the samples
// `data samples` names for each source, and every layout reports the same figures as one process.
TEST(ValidationLayout, EachSourceOfABlendHasItsOwnFiguresInEveryLayout) {
  TempDir dir;
  const auto prefixes = two_sources(dir / "data");
  const std::vector<std::string> common = {
      fmt::format("model.data.data_prefix=[0.7,zh:{},0.3,{}]", prefixes[0], prefixes[1]),
      "model.make_vocab_size_divisible_by=16",
      "trainer.max_steps=2",
      "model.optim.sched.warmup_steps=1",
      "trainer.val_check_interval=2",
      "trainer.limit_val_batches=2"};
  auto run = [&](int ranks, const std::string& name, std::vector<std::string> layout) {
    layout.insert(layout.end(), common.begin(), common.end());
    const auto r = testing::run_in(dir / name, testing::mpi_train_argv(MPIEXEC, ranks, dir / name, layout));
    EXPECT_EQ(r.status, 0) << r.log;
    return validation_at_2(dir / name);
  };
  const auto one = run(0, "one", {"convert_to_hf=true", "model.output_dir=" + (dir / "hf")});
  const std::vector<std::string> keys = {"val_loss",   "val_bits_per_byte", "val_bits_per_char",
                                         "val_tokens", "val_bytes",         "val_chars"};
  for (const std::string source : {"zh", "second"})
    for (const auto& key : keys) ASSERT_TRUE(one.contains(key + "/" + source)) << key << "/" << source;
  // The sources partition the blend's targets, and their nats add up to the blend's.
  for (const char* key : {"val_tokens", "val_bytes", "val_chars"})
    EXPECT_EQ(one.at(std::string(key) + "/zh") + one.at(std::string(key) + "/second"), one.at(key)) << key;
  EXPECT_GT(one.at("val_tokens/zh"), one.at("val_tokens/second"));  // 70/30
  const double nats =
      one.at("val_loss/zh") * one.at("val_tokens/zh") + one.at("val_loss/second") * one.at("val_tokens/second");
  EXPECT_NEAR(nats / one.at("val_tokens"), one.at("val_loss"), 1e-6 * one.at("val_loss"));
  EXPECT_NE(one.at("val_loss/zh"), one.at("val_loss/second"));

  // The console names each source; report draws a chart for each.
  const std::string log = testing::read_file(dir / "one/train_log.txt");
  EXPECT_NE(log.find("  zh:"), std::string::npos) << log;
  EXPECT_NE(log.find("  second:"), std::string::npos) << log;
  obs::ReportOptions ro;
  const std::string html = obs::render_report({obs::read_run(dir / "one")}, ro);
  for (const char* chart : {"val_loss/zh", "val_loss/second", "val_bits_per_char/second"})
    EXPECT_NE(html.find(fmt::format("data-metric=\"{}\"", chart)), std::string::npos) << chart;
  EXPECT_EQ(html.find("data-metric=\"val_tokens/zh\""), std::string::npos);

  // TensorBoard: a tag per source, read back by the independent reader.
  std::string events;
  for (const auto& e : std::filesystem::directory_iterator(dir / "one"))
    if (e.path().filename().string().starts_with("events.out.tfevents")) events = e.path();
  ASSERT_FALSE(events.empty()) << "no TensorBoard event file in " << (dir / "one");
  std::string records;
  ASSERT_EQ(testing::run_capture(fmt::format("{} {} {}", testing::system_python(),
                                             testing::source_path("tests/obs/read_tfevents.py"), events),
                                 &records),
            0)
      << records;
  for (const char* tag : {"val_loss/zh", "val_loss/second", "val_bits_per_char/zh"})
    EXPECT_NE(records.find(fmt::format("\"tag\": \"{}\"", tag)), std::string::npos) << tag;

  // PyTorch on the samples the run validated on (2 batches of 8), each named with its source.
  if (auto why = testing::python_missing({"numpy", "torch", "sentencepiece"}); why.empty()) {
    // `llamatrain data samples` with the run's config and overrides in place of `train`.
    std::vector<std::string> argv = testing::mpi_train_argv(MPIEXEC, 0, dir / "samples", common);
    argv[1] = "samples";
    argv.insert(argv.begin() + 1, "data");
    std::string cmd;
    for (const auto& a : argv) cmd += "'" + a + "' ";
    std::string samples;
    ASSERT_EQ(testing::run_capture(
                  fmt::format("{}--split validation --first 16 --json > {}", cmd, dir / "samples.jsonl"), &samples),
              0)
        << samples;
    std::string ref;
    ASSERT_EQ(testing::run_capture(fmt::format("{} {} {} --samples {} --tokenizer {}", testing::system_python(),
                                               testing::source_path("tools/reference/bits_per_byte.py"), dir / "hf",
                                               dir / "samples.jsonl", testing::fixture("tokenizer.model")),
                                   &ref),
              0)
        << ref;
    const auto want = nlohmann::json::parse(ref.substr(ref.find('{')));
    for (const std::string source : {"zh", "second"}) {
      SCOPED_TRACE(source);
      const auto& w = want["sources"][source];
      EXPECT_EQ(one.at("val_tokens/" + source), w["tokens"].get<double>());
      EXPECT_EQ(one.at("val_bytes/" + source), w["bytes"].get<double>());
      EXPECT_EQ(one.at("val_chars/" + source), w["chars"].get<double>());
      EXPECT_NEAR(one.at("val_loss/" + source), w["loss"].get<double>(), 1e-5 * w["loss"].get<double>());
      EXPECT_NEAR(one.at("val_bits_per_char/" + source), w["bits_per_char"].get<double>(),
                  1e-5 * w["bits_per_char"].get<double>());
    }
  } else {
    std::printf("[  SKIPPED ] the PyTorch comparison: %s\n", why.c_str());
  }

  struct Layout {
    int dp, tp, pp;
  };
  for (const Layout l : {Layout{2, 1, 2}, Layout{1, 2, 1}}) {
    const std::string name = fmt::format("dp{}_tp{}_pp{}", l.dp, l.tp, l.pp);
    SCOPED_TRACE(name);
    std::vector<std::string> layout = {"model.tensor_model_parallel_size=" + std::to_string(l.tp),
                                       "model.pipeline_model_parallel_size=" + std::to_string(l.pp)};
    if (l.tp > 1) layout.push_back("model.sequence_parallel=true");
    const auto got = run(l.dp * l.tp * l.pp, name, layout);
    for (const std::string source : {"zh", "second"})
      for (const auto& key : keys) {
        const std::string k = key + "/" + source;
        ASSERT_TRUE(got.contains(k)) << k;
        if (key == "val_tokens" || key == "val_bytes" || key == "val_chars") {
          EXPECT_EQ(got.at(k), one.at(k)) << k;
        } else {
          EXPECT_NEAR(got.at(k), one.at(k), 1e-5 * one.at(k)) << k;
        }
      }
  }
}

}  // namespace
}  // namespace llamatrain
