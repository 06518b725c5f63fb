// The benchmark readers (benchmark.h): one set of readers for every Task's layout (task.h), the
// differences being the Task's fields.
#include "eval/benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/file.h"
#include "eval/csv.h"

namespace llamatrain::eval {

namespace {

namespace fs = std::filesystem;

// ---- file layout ----

// The file name of a subject in a split: <subject>_<split>.csv, or <subject>.csv.
std::string file_name(const Task& t, const std::string& subject, const std::string& split) {
  return t.split_in_file_names ? fmt::format("{}_{}.csv", subject, split) : subject + ".csv";
}
// The dev / scored file of a subject, relative to the root.
std::string dev_file(const Task& t, const std::string& subject) {
  return fmt::format("dev/{}", file_name(t, subject, "dev"));
}
std::string scored_file(const Task& t, const std::string& subject) {
  return fmt::format("{}/{}", t.split, file_name(t, subject, t.split));
}
// The subject a scored file's name stands for ("" when the name does not fit the layout).
std::string subject_of(const Task& t, const std::string& filename) {
  const std::string suffix = file_name(t, "", t.split);
  if (filename.size() <= suffix.size() || !filename.ends_with(suffix)) return "";
  return filename.substr(0, filename.size() - suffix.size());
}

// The folder holding the splits: dir, or (an archive that unpacks into a folder of its own) the
// folder inside it.
std::string find_root(const Task& t, const std::string& dir) {
  if (!is_directory(dir)) fail("--data {}: no such folder\nhint: {}", dir, t.layout_hint);
  const std::string split = t.split;
  if (is_directory(dir + "/" + split)) return dir;
  const std::string inner = t.inner_folder;
  if (!inner.empty() && is_directory(dir + "/" + inner + "/" + split)) return dir + "/" + inner;
  fail("--data {}: no {}/ folder in it{}, expected {}'s layout\nhint: {}", dir, split,
       inner.empty() ? "" : fmt::format(" (nor in {}/)", inner), t.title, t.layout_hint);
}

std::vector<std::string> subjects_in(const Task& t, const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root + "/" + t.split)) {
    const std::string s = subject_of(t, e.path().filename().string());
    if (!s.empty() && e.is_regular_file()) out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  if (out.empty())
    fail("{}/{}: no {} files, expected {}\nhint: {}", root, t.split, file_name(t, "*", t.split),
         scored_file(t, "<subject>"), t.layout_hint);
  return out;
}

const SubjectRow& find_subject(const Task& t, const std::string& name, const std::string& file) {
  for (const auto& row : t.subjects)
    if (name == row.name) return row;
  fail("{}: '{}' is not one of {}'s {} subjects, expected the published file names\nhint: remove the file, or "
       "leave it out with --subjects",
       file, name, t.title, t.subjects.size());
}

// ---- rows ----

// The columns of a header file holding question, A-D and answer (named by the task: C-Eval's
// lower-case "question" and "answer", CMMLU's "Question" and "Answer"), or the fixed positions of a
// file without a header (MMLU).
struct Columns {
  int question = 0, a = 1, answer = 5;
  size_t count = 6;
};

Columns header_columns(const Task& t, const CsvRecord& header, const std::string& path) {
  const std::string expected = t.header;
  auto find = [&](const std::string& name) {
    for (size_t i = 0; i < header.fields.size(); i++)
      if (header.fields[i] == name) return int(i);
    fail("{}:{}: the header has no '{}' column, expected {}\nhint: {}", path, header.line, name, expected,
         t.layout_hint);
  };
  Columns c;
  c.question = find(t.question_column);
  c.a = find("A");
  for (int k = 1; k < 4; k++)
    if (find(std::string(1, char('A' + k))) != c.a + k)
      fail("{}:{}: columns A, B, C, D are not side by side, expected {}", path, header.line, expected);
  c.answer = find(t.answer_column);
  c.count = header.fields.size();
  return c;
}

int answer_index(const std::string& field, const std::string& where) {
  std::string s = field;
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  if (s.size() == 1 && s[0] >= 'A' && s[0] <= 'D') return s[0] - 'A';
  if (s.empty())
    fail("{}: the answer is empty, expected one of A, B, C, D\nhint: this split has no answers (C-Eval's test "
         "split does not publish them: score val)",
         where);
  fail("{}: answer '{}', expected one of A, B, C, D\nhint: fix the row, or leave the subject out with --subjects",
       where, field);
}

Question question_of(const CsvRecord& r, const Columns& c, const std::string& path) {
  Question q;
  q.where = fmt::format("{}:{}", path, r.line);
  if (r.fields.size() != c.count)
    fail("{}: {} fields, expected {}\nhint: a field that holds a comma, a quote or a line break must be in "
         "double quotes (\"a, b\"), with its quotes doubled (\"\")",
         q.where, r.fields.size(), c.count);
  q.question = r.fields[size_t(c.question)];
  for (int k = 0; k < 4; k++) q.choices[size_t(k)] = r.fields[size_t(c.a + k)];
  q.answer = answer_index(r.fields[size_t(c.answer)], q.where);
  return q;
}

std::vector<Question> read_subject_file(const Task& t, const std::string& path, const std::string& role) {
  if (!is_regular_file(path))
    fail("{}: no such file ({})\nhint: {}{}", path, role, t.layout_hint,
         role.starts_with("few-shot") ? "; or score without examples: --shots 0" : "");
  return read_questions(t, path);
}

}  // namespace

int64_t Benchmark::num_questions() const {
  int64_t n = 0;
  for (const auto& s : subjects) n += int64_t(s.questions.size());
  return n;
}

std::vector<Question> read_questions(const Task& t, const std::string& path) {
  const std::vector<CsvRecord> records = read_csv(path);
  std::vector<Question> out;
  size_t first = 0;
  Columns columns;
  if (*t.question_column) {
    if (records.empty()) fail("{}: empty, expected a header line and questions\nhint: {}", path, t.layout_hint);
    columns = header_columns(t, records[0], path);
    first = 1;
  }
  for (size_t i = first; i < records.size(); i++) out.push_back(question_of(records[i], columns, path));
  if (out.empty()) fail("{}: no questions, expected at least one row\nhint: {}", path, t.layout_hint);
  return out;
}

Benchmark load_benchmark(const Task& t, const std::string& dir, const std::vector<std::string>& only, bool read_dev) {
  Benchmark b{&t, find_root(t, dir), {}};
  std::vector<std::string> names = subjects_in(t, b.root);
  if (!only.empty()) {
    for (const auto& s : only)
      if (std::find(names.begin(), names.end(), s) == names.end())
        fail("--subjects {}: no {} in {}/{}, expected one of: {}", s, scored_file(t, s), b.root, t.split,
             fmt::join(names, ", "));
    names = only;
  }
  for (const auto& name : names) {
    const std::string scored = b.root + "/" + scored_file(t, name);
    const SubjectRow& row = find_subject(t, name, scored);
    Subject s;
    s.name = name;
    s.categories = row.categories;
    if (row.title) {
      s.title = row.title;
    } else {
      s.title = name;
      std::replace(s.title.begin(), s.title.end(), '_', ' ');
    }
    s.questions = read_subject_file(t, scored, fmt::format("the {} questions of {}", t.split, name));
    if (read_dev) s.dev = read_subject_file(t, b.root + "/" + dev_file(t, name), "few-shot examples of " + name);
    b.subjects.push_back(std::move(s));
  }
  return b;
}

}  // namespace llamatrain::eval
