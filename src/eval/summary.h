// Accuracy of scored questions per subject, per category and overall. Two averages: micro (correct
// answers over all questions: hendrycks/test's category and overall figures for MMLU, and
// lm-evaluation-harness's group accuracy) and macro (the mean of the subjects' accuracies: C-Eval's and
// CMMLU's published averages). Task::headline_macro says which one a benchmark's papers report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/benchmark.h"
#include "eval/choice_scorer.h"

namespace llamatrain::eval {

struct Accuracy {
  int64_t questions = 0, correct = 0, correct_norm = 0;
  double acc() const { return questions > 0 ? double(correct) / double(questions) : 0.0; }
  double acc_norm() const { return questions > 0 ? double(correct_norm) / double(questions) : 0.0; }
};

struct GroupAccuracy {
  std::string name;
  Accuracy micro;
  double macro = 0;  // mean of its subjects' acc
  int subjects = 0;
};

struct Summary {
  std::vector<GroupAccuracy> subjects;    // Benchmark::subjects' order (macro: the subject's acc)
  std::vector<GroupAccuracy> categories;  // Task::categories order, those with a subject scored
  GroupAccuracy overall;
  int64_t one_pass = 0, cut = 0, fewer_shots = 0;  // questions: one forward for 4 choices; cut; < --shots
};

Summary summarize(const Benchmark& b, const std::vector<ScoredQuestion>& scored, int shots);

}  // namespace llamatrain::eval
