// Multiple-choice benchmarks as their users download them: MMLU (hendrycks/test's data.tar), C-Eval
// (ceval-exam.zip) and CMMLU (cmmlu_v1_0_1.zip), read from their CSV files into subjects of
// four-choice questions, with each benchmark's published subject table (the Chinese subject names
// the prompts use, and the categories results are grouped by). Layouts:
//   MMLU   DIR[/data]/dev/<subject>_dev.csv, test/<subject>_test.csv; no header: question,A,B,C,D,answer
//   C-Eval DIR/dev/<subject>_dev.csv, val/<subject>_val.csv; header id,question,A,B,C,D,answer[,explanation]
//          (test/ has no answers: val is the split scored)
//   CMMLU  DIR/dev/<subject>.csv, test/<subject>.csv; header ,Question,A,B,C,D,Answer
// Every file problem is an Error naming the file (and line) and the fix. Prompts live in prompts.h.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace llamatrain::eval {

enum class Task { mmlu, ceval, cmmlu };
Task parse_task(const std::string& name);  // "mmlu" | "ceval" | "cmmlu"; Error otherwise
const char* task_name(Task t);             // "mmlu", ...
const char* task_title(Task t);            // "MMLU", "C-Eval", "CMMLU"
// The categories results are grouped by, in the order the benchmark's papers print them.
const std::vector<std::string>& task_categories(Task t);
// The split questions are scored on: "test" (MMLU, CMMLU) or "val" (C-Eval).
const char* scored_split(Task t);

struct Question {
  std::string question;
  std::array<std::string, 4> choices;  // A, B, C, D
  int answer = -1;                     // 0..3
  std::string where;                   // "file:line", for messages
};

struct Subject {
  std::string name;                     // "abstract_algebra": the file name's stem
  std::string title;                    // what the prompt calls it: "abstract algebra", "高等数学"
  std::vector<std::string> categories;  // of task_categories() (CMMLU: a subject may be in two)
  std::vector<Question> dev;            // the few-shot examples, in file order
  std::vector<Question> questions;      // the scored split
};

struct Benchmark {
  Task task;
  std::string root;                // the folder holding dev/ (MMLU: DIR or DIR/data)
  std::vector<Subject> subjects;   // sorted by name
  int64_t num_questions() const;
};

// Reads the benchmark under dir. subjects: only these (by file-name stem; empty: all the folder has).
// read_dev: whether the few-shot files are needed (false with --shots 0).
Benchmark load_benchmark(Task task, const std::string& dir, const std::vector<std::string>& subjects, bool read_dev);

// The questions of one CSV file in the task's layout (the header checked, every row's field count
// and answer letter): the readers' core, exposed for tests.
std::vector<Question> read_questions(Task task, const std::string& path);

}  // namespace llamatrain::eval
