// `llamatrain eval --task mmlu|ceval|cmmlu` against tools/reference/mc_benchmark.py, a Python build of
// each benchmark's prompts from lm-evaluation-harness's task files and of its scoring (the harness's
// context/continuation encoding, each choice run alone in float64 by llama_ref), on fixtures written
// here in each benchmark's published layout (quoted commas, doubled quotes, line breaks inside
// quotes, CRLF, a byte order mark, Chinese text, a question too long for the context). Per question:
// the prompt byte for byte, the examples kept, the four log-likelihoods within 1e-4 and the
// prediction; the accuracy is the count of argmax hits. The tiny model's tokenizer spells " B" in two
// pieces (each choice its own sequence); a tokenizer with single-piece " A" .. " D" takes the one-pass
// path (one forward, four log-probabilities at the last position), checked against the same reference.
// Under mpirun -np 2 the ranks share the questions and print what one process prints.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace llamatrain {
namespace {

using testing::run_cli;
using testing::TempDir;
namespace fs = std::filesystem;

const std::string kTinyHf = testing::source_path("tests/golden/tiny_hf");

void put(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  testing::write_file(path, text);
}

// A question long enough that even without examples it exceeds the tiny model's 256 tokens.
std::string long_question() {
  std::string q;
  for (int i = 0; i < 90; i++) q += "why is the sky blue ";
  return q;
}

void write_mmlu(const std::string& dir) {
  put(dir + "/data/dev/abstract_algebra_dev.csv", "Find the degree of x.,0,4,2,6,B\n"
                                                  "\"Which ring, if any, is a field?\",Z,Q,Z[x],\"None, really\",B\n"
                                                  "\"Say \"\"hi\"\"\ntwice\",hi,hi hi,no,yes,B\n"
                                                  "Is 1 a unit?,yes,no,maybe,never,A\n"
                                                  "Is 0 a unit?,yes,no,maybe,never,B\n");
  put(dir + "/data/test/abstract_algebra_test.csv",
      "What is 2+2?,3,4,5,6,B\r\n\"  Order of S3,\nexactly? \",2,3,6,9,C\r\n" + long_question() + ",a,b,c,d,D\r\n");
  put(dir + "/data/dev/virology_dev.csv", "Virus?,a,b,c,d,D\n");
  put(dir + "/data/test/virology_test.csv", "\xEF\xBB\xBFWhat causes flu?,influenza,rhino,\"adeno, maybe\",none,A\nIs "
                                            "a prion alive?,yes,no,partly,unknown,B\n");
}

void write_ceval(const std::string& dir) {
  const std::string header = "id,question,A,B,C,D,answer,explanation\n";
  put(dir + "/dev/computer_network_dev.csv",
      header +
          "0,TCP属于哪一层？,物理层,传输层,应用层,网络层,B,\"因为，TCP\"\n1,IP地址长度？,16位,32位,64位,128位,B,\n");
  put(dir + "/val/computer_network_val.csv", "id,question,A,B,C,D,answer\n0,\"以下哪个是\n协议？\",HTTP,\"猫, "
                                             "狗\",鱼,鸟,A\n1,端口号80对应？,FTP,HTTP,SSH,DNS,B\n");
  put(dir + "/test/computer_network_test.csv", "id,question,A,B,C,D\n0,题,甲,乙,丙,丁\n");
  put(dir + "/dev/law_dev.csv", header + "0,宪法是？,根本法,普通法,民法,刑法,A,\n");
  put(dir + "/val/law_val.csv", "id,question,A,B,C,D,answer\n0,\"　法律\"\"条文\"\"是？　\",规则,道德,习惯,宗教,A\n");
}

void write_cmmlu(const std::string& dir) {
  const std::string header = ",Question,A,B,C,D,Answer\n";
  put(dir + "/dev/agronomy.csv",
      header + "0,水稻属于？,禾本科,豆科,菊科,蔷薇科,A\n1,小麦的种子？,颖果,浆果,核果,蒴果,A\n");
  put(dir + "/test/agronomy.csv",
      header + "0,玉米原产于？,美洲,亚洲,欧洲,非洲,A\r\n1,\"土壤, pH 值\",酸,碱,中,盐,C\r\n");
  put(dir + "/dev/chinese_history.csv", header + "0,秦朝建立于？,前221年,前206年,前202年,220年,A\n");
  put(dir + "/test/chinese_history.csv", header + "0,唐朝的都城？,长安,洛阳,开封,北京,A\n");
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line));
  return out;
}

struct EvalRun {
  nlohmann::json summary;
  std::vector<nlohmann::json> questions;
};

EvalRun run_ours(const TempDir& tmp, const std::string& model, const std::string& task, const std::string& data,
                 const std::vector<std::string>& extra = {}) {
  const std::string dump = tmp / (task + "_dump.jsonl");
  std::vector<std::string> args = {"eval",   model, "--task", task,      "--data", data,
                                   "--dump", dump,  "--json", "--batch", "3"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_cli(args);
  EXPECT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  return {nlohmann::json::parse(r.out), json_lines(testing::read_file(dump))};
}

std::vector<nlohmann::json> run_reference(const std::string& model, const std::string& task, const std::string& data,
                                          const std::string& extra = "") {
  std::string out;
  const int rc =
      testing::run_capture(testing::system_python() + " " + testing::source_path("tools/reference/mc_benchmark.py") +
                               " " + task + " --data " + data + " --model " + model + " --seq 256" + extra,
                           &out);
  EXPECT_EQ(rc, 0) << out;
  return json_lines(out);
}

// Every question: the same prompt, examples, log-likelihoods (1e-4) and prediction; the accuracy is
// the count of argmax hits. Returns how many questions took the one-pass path.
int expect_same_questions(const EvalRun& ours, const std::vector<nlohmann::json>& want) {
  EXPECT_EQ(ours.questions.size(), want.size());
  int hits = 0, one_pass = 0;
  for (size_t i = 0; i < std::min(ours.questions.size(), want.size()); i++) {
    const auto& got = ours.questions[i];
    const auto& ref = want[i];
    const std::string where = ref["subject"].get<std::string>() + " #" + std::to_string(ref["index"].get<int>());
    EXPECT_EQ(got["subject"], ref["subject"]) << where;
    EXPECT_EQ(got["context"].get<std::string>(), ref["context"].get<std::string>()) << where;
    EXPECT_EQ(got["shots"], ref["shots"]) << where;
    for (int c = 0; c < 4; c++)
      EXPECT_NEAR(got["loglik"][size_t(c)].get<double>(), ref["loglik"][size_t(c)].get<double>(), 1e-4)
          << where << " choice " << c;
    EXPECT_EQ(got["predicted"], ref["predicted"]) << where;
    EXPECT_EQ(got["answer"], ref["answer"]) << where;
    hits += got["predicted"] == got["answer"];
    one_pass += got["one_pass"].get<bool>();
  }
  EXPECT_EQ(ours.summary["correct"].get<int>(), hits);
  EXPECT_EQ(ours.summary["questions"].get<size_t>(), want.size());
  EXPECT_DOUBLE_EQ(ours.summary["acc"].get<double>(), double(hits) / double(want.size()));
  return one_pass;
}

bool reference_missing(std::string* why) {
  *why = testing::python_missing({"numpy", "torch", "sentencepiece"});
  return !why->empty();
}

TEST(EvalBenchmark, MmluMatchesThePublishedPromptsAndAFloat64Reference) {
  if (std::string why; reference_missing(&why)) GTEST_SKIP() << why;
  TempDir tmp;
  write_mmlu(tmp / "mmlu");
  const EvalRun ours = run_ours(tmp, kTinyHf, "mmlu", tmp / "mmlu");
  const auto want = run_reference(kTinyHf, "mmlu", tmp / "mmlu");
  EXPECT_EQ(expect_same_questions(ours, want), 0);  // " B" is two pieces in this tokenizer
  // The fixtures exercise fitting: examples dropped for length, and a question cut at the front.
  EXPECT_GT(ours.summary["fewer_shots"].get<int>(), 0) << ours.summary.dump();
  EXPECT_EQ(ours.summary["cut"].get<int>(), 1) << ours.summary.dump();
  // MMLU's headline is the micro average; the categories are the published mapping's.
  EXPECT_EQ(ours.summary["headline"], "acc");
  ASSERT_EQ(ours.summary["categories"].size(), 2u);
  EXPECT_EQ(ours.summary["categories"][0]["name"], "STEM");
  EXPECT_EQ(ours.summary["categories"][1]["name"], "other");
}

TEST(EvalBenchmark, CevalScoresValWithItsChineseHeader) {
  if (std::string why; reference_missing(&why)) GTEST_SKIP() << why;
  TempDir tmp;
  write_ceval(tmp / "ceval");
  const EvalRun ours = run_ours(tmp, kTinyHf, "ceval", tmp / "ceval", {"--shots", "2"});
  expect_same_questions(ours, run_reference(kTinyHf, "ceval", tmp / "ceval", " --shots 2"));
  EXPECT_EQ(ours.summary["split"], "val");
  EXPECT_EQ(ours.summary["headline"], "acc_macro");
  // macro: the mean of the two subjects' accuracies.
  const auto& subjects = ours.summary["subjects"];
  EXPECT_DOUBLE_EQ(ours.summary["acc_macro"].get<double>(),
                   (subjects[0]["acc"].get<double>() + subjects[1]["acc"].get<double>()) / 2);
}

TEST(EvalBenchmark, CmmluReadsItsIndexColumnAndCountsChinaSpecificTwice) {
  if (std::string why; reference_missing(&why)) GTEST_SKIP() << why;
  TempDir tmp;
  write_cmmlu(tmp / "cmmlu");
  const EvalRun ours = run_ours(tmp, kTinyHf, "cmmlu", tmp / "cmmlu");
  expect_same_questions(ours, run_reference(kTinyHf, "cmmlu", tmp / "cmmlu"));
  std::map<std::string, int> questions;
  for (const auto& c : ours.summary["categories"]) questions[c["name"]] = c["questions"];
  EXPECT_EQ(questions["Other"], 2);           // agronomy
  EXPECT_EQ(questions["Humanities"], 1);      // chinese_history
  EXPECT_EQ(questions["China specific"], 1);  // chinese_history again
}

TEST(EvalBenchmark, SingleTokenLettersTakeOneForwardPassAndAgree) {
  if (std::string why; reference_missing(&why)) GTEST_SKIP() << why;
  TempDir tmp;
  // The tiny model with a tokenizer whose "▁A" .. "▁D" are pieces (500 pieces, within its 512 rows).
  const std::string model = tmp / "letters";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy(kTinyHf + "/" + f, model + "/" + f);
  std::string out;
  ASSERT_EQ(
      testing::run_capture(testing::system_python() + " " + testing::source_path("tools/reference/mc_benchmark.py") +
                               " --letter-tokenizer " + model + "/tokenizer --corpus " + testing::fixture("corpus.txt"),
                           &out),
      0)
      << out;
  write_mmlu(tmp / "mmlu");
  const EvalRun ours = run_ours(tmp, model, "mmlu", tmp / "mmlu");
  const auto want = run_reference(model, "mmlu", tmp / "mmlu");
  EXPECT_EQ(expect_same_questions(ours, want), int(want.size()));
  EXPECT_EQ(ours.summary["one_pass"].get<size_t>(), want.size());
}

// Under mpirun -np 2 the ranks deal the questions out and rank 0 prints what one process prints:
// the same summary, and a dump with every question's prompt, examples and log-likelihoods.
TEST(EvalBenchmark, TwoRanksShareTheQuestionsAndPrintWhatOneProcessPrints) {
  TempDir tmp;
  write_mmlu(tmp / "mmlu");
  const EvalRun one = run_ours(tmp, kTinyHf, "mmlu", tmp / "mmlu");
  const std::string dump = tmp / "two_dump.jsonl";
  std::string out;
  const std::string cmd = fmt::format("({} --oversubscribe --allow-run-as-root -np 2 {} eval {} --task mmlu --data {} "
                                      "--dump {} --json --batch 3 2>{})",
                                      MPIEXEC, testing::llamatrain_bin(), kTinyHf, tmp / "mmlu", dump, tmp / "err");
  ASSERT_EQ(testing::run_capture(cmd, &out), 0) << out << testing::read_file(tmp / "err");
  const nlohmann::json two = nlohmann::json::parse(out);
  for (const char* key : {"questions", "correct", "acc", "acc_norm"}) EXPECT_EQ(two[key], one.summary[key]) << key;
  EXPECT_EQ(two["subjects"], one.summary["subjects"]);
  const auto questions = json_lines(testing::read_file(dump));
  ASSERT_EQ(questions.size(), one.questions.size());
  ASSERT_EQ(questions.size(), 5u);
  for (size_t i = 0; i < questions.size(); i++) {
    for (const char* key : {"subject", "index", "shots", "cut", "one_pass", "tokens", "continuation_tokens", "context",
                            "predicted", "predicted_norm", "answer"})
      EXPECT_EQ(questions[i][key], one.questions[i][key]) << "question " << i << " " << key;
    for (int c = 0; c < 4; c++)
      EXPECT_NEAR(questions[i]["loglik"][size_t(c)].get<double>(), one.questions[i]["loglik"][size_t(c)].get<double>(),
                  1e-6)
          << "question " << i;
  }
}

TEST(EvalBenchmark, BadFilesAreAPlainErrorNamingFileAndLine) {
  TempDir tmp;
  write_mmlu(tmp / "mmlu");
  put(tmp / "mmlu/data/test/virology_test.csv", "ok?,a,b,c,d,A\nbad?,a,b,c,d,a\n");
  testing::expect_plain_error(run_cli({"eval", kTinyHf, "--task", "mmlu", "--data", tmp / "mmlu"}),
                              {tmp / "mmlu/data/test/virology_test.csv:2", "answer 'a'", "A, B, C, D"});
  put(tmp / "mmlu/data/test/virology_test.csv", "short?,a,b,c\n");
  testing::expect_plain_error(run_cli({"eval", kTinyHf, "--task", "mmlu", "--data", tmp / "mmlu"}),
                              {tmp / "mmlu/data/test/virology_test.csv:1", "4 fields, expected 6"});
  put(tmp / "mmlu/data/test/virology_test.csv", "ok?,a,b,c,d,A\n");
  fs::remove(tmp / "mmlu/data/dev/virology_dev.csv");
  testing::expect_plain_error(
      run_cli({"eval", kTinyHf, "--task", "mmlu", "--data", tmp / "mmlu", "--subjects", "abstract_algebra,virology"}),
      {tmp / "mmlu/data/dev/virology_dev.csv", "no such file", "--shots 0"});
  testing::expect_plain_error(run_cli({"eval", kTinyHf, "--task", "mmlu", "--data", tmp / "nowhere"}),
                              {tmp / "nowhere", "no such folder", "data.tar"});
  testing::expect_plain_error(run_cli({"eval", kTinyHf, "--task", "mmlu", "--data", tmp / "mmlu", "--shots", "6"}),
                              {"--shots 6", "0 to 5"});
}

}  // namespace
}  // namespace llamatrain
