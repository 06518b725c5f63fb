// The benchmark files and prompts without a model: RFC 4180 records (quoted commas, doubled quotes,
// line breaks inside quotes, CRLF, a byte order mark), each layout's reader (MMLU without header,
// C-Eval's and CMMLU's headers by name), the errors a user's file can cause (each naming file:line and
// the fix), Python's str.strip(), and the prompt strings of each benchmark written out by hand from
// lm-evaluation-harness's task files (the byte-for-byte check against a Python build of the prompts is
// tests/cli/eval_benchmark_test.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "eval/benchmark.h"
#include "eval/csv.h"
#include "eval/prompts.h"
#include "test_util.h"

namespace llamatrain::eval {
namespace {

using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Csv, QuotedFieldsHoldCommasQuotesAndLineBreaks) {
  const auto r = parse_csv("\xEF\xBB\xBF"
                           "a,\"b, c\",\"say \"\"hi\"\"\"\r\n\r\n\"two\nlines\",x,\r\nlast,1,2",
                           "f.csv");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].fields, (std::vector<std::string>{"a", "b, c", "say \"hi\""}));
  EXPECT_EQ(r[0].line, 1);
  EXPECT_EQ(r[1].fields, (std::vector<std::string>{"two\nlines", "x", ""}));
  EXPECT_EQ(r[1].line, 3);
  EXPECT_EQ(r[2].fields, (std::vector<std::string>{"last", "1", "2"}));
  EXPECT_EQ(r[2].line, 5);
}

TEST(Csv, BrokenQuotesNameTheLine) {
  EXPECT_NE(error_of([] { parse_csv("a,b\n\"open,\nstill", "f.csv"); }).find("f.csv:2: a quoted field is never closed"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_csv("a,b\nc,\"d\"x\n", "f.csv"); }).find("f.csv:2: text after the closing quote"),
            std::string::npos);
}

TEST(Python, StripRemovesUnicodeWhiteSpaceOnly) {
  EXPECT_EQ(python_strip(" \t\n x y \r\n"), "x y");
  EXPECT_EQ(python_strip("\xE3\x80\x80题目\xC2\xA0"), "题目");  // U+3000 and NBSP are str.isspace()
  EXPECT_EQ(python_strip("\xE2\x80\x8B"
                         "a"),
            "\xE2\x80\x8B"
            "a");  // U+200B (zero width) is not
  EXPECT_EQ(python_strip("   "), "");
  EXPECT_EQ(python_strip("\xFF x \xFF"), "\xFF x \xFF");  // invalid bytes are kept
}

Subject subject_with(const std::string& title, std::vector<Question> dev) {
  Subject s;
  s.name = "x";
  s.title = title;
  s.dev = std::move(dev);
  return s;
}

TEST(Prompts, MmluAsTheHarnessWritesIt) {
  const Subject s =
      subject_with("abstract algebra", {{"Q1?", {"a", "b", "c", "d"}, 1, ""}, {"Q2", {"1", "2", "3", "4"}, 3, ""}});
  const Question q{"  Find x.\n", {"0", "1", "2", "3"}, 0, ""};
  EXPECT_EQ(build_context(parse_task("mmlu"), s, 2, q),
            "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
            "Q1?\nA. a\nB. b\nC. c\nD. d\nAnswer: B\n\n"
            "Q2\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer: D\n\n"
            "Find x.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer:");
  EXPECT_EQ(build_context(parse_task("mmlu"), s, 0, q),
            "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
            "Find x.\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer:");
  EXPECT_EQ(continuation(2), " C");
}

TEST(Prompts, CevalAndCmmluUseTheirChineseHeaders) {
  const Subject s = subject_with("高等数学", {{"一加一？", {"1", "2", "3", "4"}, 1, ""}});
  const Question q{"二加二？", {"2", "3", "4", "5"}, 2, ""};
  EXPECT_EQ(build_context(parse_task("ceval"), s, 1, q),
            "以下是中国关于高等数学的单项选择题，请选出其中的正确答案。\n\n"
            "一加一？\nA. 1\nB. 2\nC. 3\nD. 4\n答案： B\n\n"
            "二加二？\nA. 2\nB. 3\nC. 4\nD. 5\n答案：");
  EXPECT_EQ(build_context(parse_task("cmmlu"), s, 1, q),
            "以下是关于高等数学的单项选择题，请直接给出正确答案的选项。\n\n"
            "一加一？\nA. 1\nB. 2\nC. 3\nD. 4\n答案： B\n\n"
            "二加二？\nA. 2\nB. 3\nC. 4\nD. 5\n答案：");
}

// ---- the layouts ----

struct Layout {
  TempDir tmp;
  std::string root() const { return tmp.path(); }
  void put(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(tmp / rel).parent_path());
    write_file(tmp / rel, text);
  }
};

TEST(Readers, EachLayoutReadsItsColumns) {
  Layout mmlu;
  mmlu.put("data/dev/virology_dev.csv", "Dev q,a,b,c,d,A\n");
  mmlu.put("data/test/virology_test.csv", "\"What, exactly?\",a,b,c,d,C\r\nWhy,1,2,3,4,D\r\n");
  const Benchmark m = load_benchmark(parse_task("mmlu"), mmlu.root(), {}, true);  // the folder above data/
  ASSERT_EQ(m.subjects.size(), 1u);
  EXPECT_EQ(m.subjects[0].title, "virology");
  EXPECT_EQ(m.subjects[0].categories, (std::vector<std::string>{"other"}));
  ASSERT_EQ(m.subjects[0].questions.size(), 2u);
  EXPECT_EQ(m.subjects[0].questions[0].question, "What, exactly?");
  EXPECT_EQ(m.subjects[0].questions[0].answer, 2);
  EXPECT_EQ(m.subjects[0].questions[1].where, mmlu.tmp / "data/test/virology_test.csv:2");

  Layout ceval;
  ceval.put("dev/law_dev.csv", "id,question,A,B,C,D,answer,explanation\n0,问,甲,乙,丙,丁,A,因为\n");
  ceval.put("val/law_val.csv", "id,question,A,B,C,D,answer\n0,\"问，\n题\",甲,乙,丙,丁,D\n");
  ceval.put("test/law_test.csv", "id,question,A,B,C,D\n0,问,甲,乙,丙,丁\n");
  const Benchmark c = load_benchmark(parse_task("ceval"), ceval.root(), {}, true);
  EXPECT_EQ(c.subjects[0].title, "法学");
  EXPECT_EQ(c.subjects[0].questions[0].question, "问，\n题");
  EXPECT_EQ(c.subjects[0].questions[0].answer, 3);
  EXPECT_EQ(c.subjects[0].dev[0].choices[3], "丁");

  Layout cmmlu;
  cmmlu.put("dev/chinese_history.csv", ",Question,A,B,C,D,Answer\n0,问,甲,乙,丙,丁,B\n");
  cmmlu.put("test/chinese_history.csv", ",Question,A,B,C,D,Answer\n0,问,甲,乙,丙,丁,C\n");
  const Benchmark h = load_benchmark(parse_task("cmmlu"), cmmlu.root(), {}, true);
  EXPECT_EQ(h.subjects[0].title, "中国历史");
  EXPECT_EQ(h.subjects[0].categories, (std::vector<std::string>{"Humanities", "China specific"}));
  EXPECT_EQ(h.subjects[0].questions[0].answer, 2);
}

TEST(Readers, MistakesNameTheFileLineAndFix) {
  Layout l;
  EXPECT_NE(error_of([&] { load_benchmark(parse_task("mmlu"), l.tmp / "none", {}, true); }).find("no such folder"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_benchmark(parse_task("mmlu"), l.root(), {}, true); }).find("no test/ folder"),
            std::string::npos);
  l.put("test/anatomy_test.csv", "q,a,b,c,d,A\n");
  std::string e = error_of([&] { load_benchmark(parse_task("mmlu"), l.root(), {}, true); });
  EXPECT_NE(e.find(l.tmp / "dev/anatomy_dev.csv: no such file"), std::string::npos) << e;
  EXPECT_NE(e.find("--shots 0"), std::string::npos) << e;
  l.put("test/anatomy_test.csv", "q,a,b,c,d,A\nq2,a,b,c,d,E\n");
  e = error_of([&] { load_benchmark(parse_task("mmlu"), l.root(), {}, false); });
  EXPECT_NE(e.find(l.tmp / "test/anatomy_test.csv:2: answer 'E', expected one of A, B, C, D"), std::string::npos) << e;
  l.put("test/anatomy_test.csv", "q,a,b,c,d,A\n\"q, 2\",a,b,c,A\n");
  e = error_of([&] { load_benchmark(parse_task("mmlu"), l.root(), {}, false); });
  EXPECT_NE(e.find(l.tmp / "test/anatomy_test.csv:2: 5 fields, expected 6"), std::string::npos) << e;
  EXPECT_NE(e.find("double quotes"), std::string::npos) << e;
  e = error_of([&] { load_benchmark(parse_task("mmlu"), l.root(), {"virology"}, false); });
  EXPECT_NE(e.find("--subjects virology"), std::string::npos) << e;
  EXPECT_NE(e.find("anatomy"), std::string::npos) << e;
  l.put("test/anatomy_test.csv", "q,a,b,c,d,A\n");
  l.put("test/not_a_subject_test.csv", "q,a,b,c,d,A\n");
  e = error_of([&] { load_benchmark(parse_task("mmlu"), l.root(), {}, false); });
  EXPECT_NE(e.find("'not_a_subject' is not one of MMLU's 57 subjects"), std::string::npos) << e;

  Layout c;
  c.put("val/law_val.csv", "id,question,A,B,C,D\n0,q,a,b,c,d\n");
  e = error_of([&] { load_benchmark(parse_task("ceval"), c.root(), {}, false); });
  EXPECT_NE(e.find(c.tmp / "val/law_val.csv:1: the header has no 'answer' column"), std::string::npos) << e;
}

}  // namespace
}  // namespace llamatrain::eval
