// A multiple-choice benchmark as data: everything that differs between MMLU, C-Eval and CMMLU (names,
// file layout, CSV header, prompt words, headline average, categories and the published subject
// table) is one Task, defined in one file of src/eval/tasks/ and listed in all_tasks()
// (src/eval/task.cpp). The readers (benchmark.h), prompts (prompts.h), scorer and summary read
// these fields and name no benchmark. docs/training.md's "Benchmarks" says how to add one.
#pragma once

#include <string>
#include <vector>

namespace llamatrain::eval {

// One subject of a benchmark's published table.
struct SubjectRow {
  const char* name;                     // the file name's stem: "abstract_algebra"
  const char* title;                    // what the prompt calls it ("高等数学"); nullptr: the name's words
  std::vector<std::string> categories;  // of Task::categories (CMMLU: a subject may be in two)
};

struct Task {
  // Names.
  const char* name;   // --task: "mmlu"
  const char* title;  // "MMLU"
  // Files: DIR/dev/<subject>_dev.csv and DIR/<split>/<subject>_<split>.csv, or with
  // split_in_file_names false DIR/dev/<subject>.csv and DIR/<split>/<subject>.csv.
  const char* split;            // the split scored: "test" (C-Eval: "val", its test answers being unpublished)
  bool split_in_file_names;     // see above
  const char* inner_folder;     // "" or the folder the archive unpacks into, which --data may stand above
  const char* question_column;  // the header's question and answer columns (A..D are "A".."D"); "": the
  const char* answer_column;    // files have no header and the columns are question,A,B,C,D,answer
  const char* header;           // the header as messages spell it: ",Question,A,B,C,D,Answer"
  const char* layout_hint;      // where the archive comes from and what --data names
  const char* note;             // "" or a note printed before scoring (what is scored, and why)
  // Prompts (prompts.h): description + examples + question_text.
  const char* description;    // fmt string, {} the subject's title: "The following are ... about {}.\n\n"
  const char* answer_prompt;  // after the choices: "\nAnswer:"
  // Results (summary.h).
  bool headline_macro;                  // the papers' average: macro (over subjects) or micro (over questions)
  std::vector<std::string> categories;  // in the order the papers print them
  std::vector<SubjectRow> subjects;
};

// Every benchmark --task knows, in the order help lists them.
const std::vector<const Task*>& all_tasks();
// The task named name; an Error naming the known ones otherwise.
const Task& parse_task(const std::string& name);
// The tasks' names, joined: task_names(" | ") is "mmlu | ceval | cmmlu".
std::string task_names(const std::string& separator);

}  // namespace llamatrain::eval
