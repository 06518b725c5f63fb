// Multiple-choice benchmarks as their users download them (MMLU's data.tar, C-Eval's ceval-exam.zip,
// CMMLU's cmmlu_v1_0_1.zip, ...), read from their CSV files into subjects of four-choice questions,
// with each benchmark's published subject table (the subject names the prompts use, and the
// categories results are grouped by). What differs between benchmarks (the layout, the header, the
// table) is the Task's (task.h, one file per benchmark in tasks/); the readers here serve them all:
//   DIR[/inner_folder]/dev/<subject>[_dev].csv and <split>/<subject>[_<split>].csv, with a header
//   naming the question and answer columns, or none (question,A,B,C,D,answer).
// Every file problem is an Error naming the file (and line) and the fix. Prompts live in prompts.h.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "eval/task.h"

namespace llamatrain::eval {

struct Question {
  std::string question;
  std::array<std::string, 4> choices;  // A, B, C, D
  int answer = -1;                     // 0..3
  std::string where;                   // "file:line", for messages
};

struct Subject {
  std::string name;                     // "abstract_algebra": the file name's stem
  std::string title;                    // what the prompt calls it: "abstract algebra", "高等数学"
  std::vector<std::string> categories;  // of Task::categories (CMMLU: a subject may be in two)
  std::vector<Question> dev;            // the few-shot examples, in file order
  std::vector<Question> questions;      // the scored split
};

struct Benchmark {
  const Task* task;
  std::string root;               // the folder holding dev/ (DIR, or DIR/<inner_folder>)
  std::vector<Subject> subjects;  // sorted by name
  int64_t num_questions() const;
};

// Reads the benchmark under dir. subjects: only these (by file-name stem; empty: all the folder has).
// read_dev: whether the few-shot files are needed (false with --shots 0).
Benchmark load_benchmark(const Task& task, const std::string& dir, const std::vector<std::string>& subjects,
                         bool read_dev);

// The questions of one CSV file in the task's layout (the header checked, every row's field count
// and answer letter): the readers' core, exposed for tests.
std::vector<Question> read_questions(const Task& task, const std::string& path);

}  // namespace llamatrain::eval
