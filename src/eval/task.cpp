// The table of benchmarks (task.h): one line per task, whose file in src/eval/tasks/ defines it.
#include "eval/task.h"

#include <fmt/format.h>

#include "core/error.h"

namespace llamatrain::eval {

const Task& mmlu_task();   // tasks/mmlu.cpp
const Task& ceval_task();  // tasks/ceval.cpp
const Task& cmmlu_task();  // tasks/cmmlu.cpp

const std::vector<const Task*>& all_tasks() {
  static const std::vector<const Task*> tasks = {&mmlu_task(), &ceval_task(), &cmmlu_task()};
  return tasks;
}

const Task& parse_task(const std::string& name) {
  for (const Task* t : all_tasks())
    if (name == t->name) return *t;
  std::string expected;
  const auto& tasks = all_tasks();
  for (size_t i = 0; i < tasks.size(); i++)
    expected += fmt::format("{}{}", i == 0 ? "" : i + 1 == tasks.size() ? " or " : ", ", tasks[i]->name);
  fail("--task {}: unknown benchmark, expected {}", name, expected);
}

std::string task_names(const std::string& separator) {
  std::vector<std::string> names;
  for (const Task* t : all_tasks()) names.push_back(t->name);
  return fmt::format("{}", fmt::join(names, separator));
}

}  // namespace llamatrain::eval
