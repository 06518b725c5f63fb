// The prompts of the multiple-choice benchmarks, built as lm-evaluation-harness's mmlu, ceval-valid
// and cmmlu tasks build them (docs/training.md, "Benchmarks", says why this variant and how it
// differs from each benchmark's own script):
//   context = description + shot_1 + "\n\n" + ... + shot_k + "\n\n" + question_text
//   question_text = question.strip() + "\nA. " + A + "\nB. " + B + "\nC. " + C + "\nD. " + D + "\nAnswer:"
//                   (the Task's answer_prompt: C-Eval, CMMLU "\n答案：" in place of "\nAnswer:")
//   shot_i = question_text of dev row i + " " + its answer letter (the first k dev rows, in file order)
//   continuation of choice c = " " + letter
// description: the Task's (task.h, tasks/*.cpp) with the subject's title: MMLU "The following are
// multiple choice questions (with answers) about <subject words>.\n\n"; C-Eval
// "以下是中国关于<中文科目>的单项选择题，请选出其中的正确答案。\n\n"; CMMLU
// "以下是关于<中文科目>的单项选择题，请直接给出正确答案的选项。\n\n".
#pragma once

#include <string>
#include <string_view>

#include "eval/benchmark.h"

namespace llamatrain::eval {

// Python's str.strip(): leading and trailing Unicode white space (str.isspace) removed.
std::string python_strip(std::string_view s);

std::string prompt_description(const Task& t, const Subject& s);
std::string question_text(const Task& t, const Question& q);
std::string continuation(int choice);  // " A" .. " D"
// The context a question is scored after, with the subject's first `shots` dev rows as examples.
std::string build_context(const Task& t, const Subject& s, int shots, const Question& q);

}  // namespace llamatrain::eval
