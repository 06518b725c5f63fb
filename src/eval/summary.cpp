// Grouping scored questions into subjects, categories and the whole benchmark.
#include "eval/summary.h"

#include <algorithm>

namespace llamatrain::eval {

namespace {

void add(Accuracy* a, const Accuracy& b) {
  a->questions += b.questions;
  a->correct += b.correct;
  a->correct_norm += b.correct_norm;
}

// The micro and macro figures of a set of subjects.
GroupAccuracy group_of(const std::string& name, const std::vector<const GroupAccuracy*>& members) {
  GroupAccuracy g;
  g.name = name;
  for (const auto* s : members) {
    add(&g.micro, s->micro);
    g.macro += s->micro.acc();
  }
  g.subjects = int(members.size());
  if (g.subjects > 0) g.macro /= double(g.subjects);
  return g;
}

}  // namespace

Summary summarize(const Benchmark& b, const std::vector<ScoredQuestion>& scored, int shots) {
  Summary out;
  for (const auto& s : b.subjects) out.subjects.push_back({s.name, {}, 0, 1});
  for (const auto& q : scored) {
    Accuracy& a = out.subjects[size_t(q.prepared.subject)].micro;
    a.questions++;
    a.correct += q.predicted == q.answer;
    a.correct_norm += q.predicted_norm == q.answer;
    out.one_pass += q.prepared.one_pass;
    out.cut += q.prepared.cut;
    out.fewer_shots += q.prepared.shots < shots;
  }
  for (auto& s : out.subjects) s.macro = s.micro.acc();
  for (const auto& category : b.task->categories) {
    std::vector<const GroupAccuracy*> members;
    for (size_t i = 0; i < b.subjects.size(); i++) {
      const auto& cats = b.subjects[i].categories;
      if (std::find(cats.begin(), cats.end(), category) != cats.end()) members.push_back(&out.subjects[i]);
    }
    if (!members.empty()) out.categories.push_back(group_of(category, members));
  }
  std::vector<const GroupAccuracy*> all;
  for (const auto& s : out.subjects) all.push_back(&s);
  out.overall = group_of("overall", all);
  return out;
}

}  // namespace llamatrain::eval
