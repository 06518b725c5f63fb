// The three readers and the published subject tables: MMLU's from hendrycks/test categories.py
// (subcategory -> STEM / humanities / social sciences / other), C-Eval's subject_mapping.json (its
// clinical_medicine row names no category; the C-Eval paper lists it under Other), CMMLU's
// categories.py (name_en2zh; a subject whose subcategories fall in two categories counts in both,
// as its results script does, "China specific" being one).
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

struct SubjectRow {
  const char* name;
  const char* zh;  // Chinese name (C-Eval, CMMLU); nullptr for MMLU
  std::vector<std::string> categories;
};

const std::vector<SubjectRow>& mmlu_subjects() {
  static const std::string S = "STEM", H = "humanities", SS = "social sciences", O = "other";
  static const std::vector<SubjectRow> t = {
      {"abstract_algebra", nullptr, {S}}, {"anatomy", nullptr, {O}}, {"astronomy", nullptr, {S}},
      {"business_ethics", nullptr, {O}}, {"clinical_knowledge", nullptr, {O}}, {"college_biology", nullptr, {S}},
      {"college_chemistry", nullptr, {S}}, {"college_computer_science", nullptr, {S}},
      {"college_mathematics", nullptr, {S}}, {"college_medicine", nullptr, {O}}, {"college_physics", nullptr, {S}},
      {"computer_security", nullptr, {S}}, {"conceptual_physics", nullptr, {S}}, {"econometrics", nullptr, {SS}},
      {"electrical_engineering", nullptr, {S}}, {"elementary_mathematics", nullptr, {S}},
      {"formal_logic", nullptr, {H}}, {"global_facts", nullptr, {O}}, {"high_school_biology", nullptr, {S}},
      {"high_school_chemistry", nullptr, {S}}, {"high_school_computer_science", nullptr, {S}},
      {"high_school_european_history", nullptr, {H}}, {"high_school_geography", nullptr, {SS}},
      {"high_school_government_and_politics", nullptr, {SS}}, {"high_school_macroeconomics", nullptr, {SS}},
      {"high_school_mathematics", nullptr, {S}}, {"high_school_microeconomics", nullptr, {SS}},
      {"high_school_physics", nullptr, {S}}, {"high_school_psychology", nullptr, {SS}},
      {"high_school_statistics", nullptr, {S}}, {"high_school_us_history", nullptr, {H}},
      {"high_school_world_history", nullptr, {H}}, {"human_aging", nullptr, {O}}, {"human_sexuality", nullptr, {SS}},
      {"international_law", nullptr, {H}}, {"jurisprudence", nullptr, {H}}, {"logical_fallacies", nullptr, {H}},
      {"machine_learning", nullptr, {S}}, {"management", nullptr, {O}}, {"marketing", nullptr, {O}},
      {"medical_genetics", nullptr, {O}}, {"miscellaneous", nullptr, {O}}, {"moral_disputes", nullptr, {H}},
      {"moral_scenarios", nullptr, {H}}, {"nutrition", nullptr, {O}}, {"philosophy", nullptr, {H}},
      {"prehistory", nullptr, {H}}, {"professional_accounting", nullptr, {O}}, {"professional_law", nullptr, {H}},
      {"professional_medicine", nullptr, {O}}, {"professional_psychology", nullptr, {SS}},
      {"public_relations", nullptr, {SS}}, {"security_studies", nullptr, {SS}}, {"sociology", nullptr, {SS}},
      {"us_foreign_policy", nullptr, {SS}}, {"virology", nullptr, {O}}, {"world_religions", nullptr, {H}},
  };
  return t;
}

const std::vector<SubjectRow>& ceval_subjects() {
  static const std::string S = "STEM", SS = "Social Science", H = "Humanities", O = "Other";
  static const std::vector<SubjectRow> t = {
      {"computer_network", "计算机网络", {S}}, {"operating_system", "操作系统", {S}},
      {"computer_architecture", "计算机组成", {S}}, {"college_programming", "大学编程", {S}},
      {"college_physics", "大学物理", {S}}, {"college_chemistry", "大学化学", {S}},
      {"advanced_mathematics", "高等数学", {S}}, {"probability_and_statistics", "概率统计", {S}},
      {"discrete_mathematics", "离散数学", {S}}, {"electrical_engineer", "注册电气工程师", {S}},
      {"metrology_engineer", "注册计量师", {S}}, {"high_school_mathematics", "高中数学", {S}},
      {"high_school_physics", "高中物理", {S}}, {"high_school_chemistry", "高中化学", {S}},
      {"high_school_biology", "高中生物", {S}}, {"middle_school_mathematics", "初中数学", {S}},
      {"middle_school_biology", "初中生物", {S}}, {"middle_school_physics", "初中物理", {S}},
      {"middle_school_chemistry", "初中化学", {S}}, {"veterinary_medicine", "兽医学", {S}},
      {"college_economics", "大学经济学", {SS}}, {"business_administration", "工商管理", {SS}},
      {"marxism", "马克思主义基本原理", {SS}}, {"mao_zedong_thought", "毛泽东思想和中国特色社会主义理论体系概论", {SS}},
      {"education_science", "教育学", {SS}}, {"teacher_qualification", "教师资格", {SS}},
      {"high_school_politics", "高中政治", {SS}}, {"high_school_geography", "高中地理", {SS}},
      {"middle_school_politics", "初中政治", {SS}}, {"middle_school_geography", "初中地理", {SS}},
      {"modern_chinese_history", "近代史纲要", {H}}, {"ideological_and_moral_cultivation", "思想道德修养与法律基础", {H}},
      {"logic", "逻辑学", {H}}, {"law", "法学", {H}}, {"chinese_language_and_literature", "中国语言文学", {H}},
      {"art_studies", "艺术学", {H}}, {"professional_tour_guide", "导游资格", {H}},
      {"legal_professional", "法律职业资格", {H}}, {"high_school_chinese", "高中语文", {H}},
      {"high_school_history", "高中历史", {H}}, {"middle_school_history", "初中历史", {H}},
      {"civil_servant", "公务员", {O}}, {"sports_science", "体育学", {O}}, {"plant_protection", "植物保护", {O}},
      {"basic_medicine", "基础医学", {O}}, {"clinical_medicine", "临床医学", {O}},
      {"urban_and_rural_planner", "注册城乡规划师", {O}}, {"accountant", "注册会计师", {O}},
      {"fire_engineer", "注册消防工程师", {O}}, {"environmental_impact_assessment_engineer", "环境影响评价工程师", {O}},
      {"tax_accountant", "税务师", {O}}, {"physician", "医师资格", {O}},
  };
  return t;
}

const std::vector<SubjectRow>& cmmlu_subjects() {
  static const std::string S = "STEM", H = "Humanities", SS = "Social Science", O = "Other", C = "China specific";
  static const std::vector<SubjectRow> t = {
      {"agronomy", "农学", {O}}, {"anatomy", "解剖学", {S}}, {"ancient_chinese", "古汉语", {SS, C}},
      {"arts", "艺术学", {H}}, {"astronomy", "天文学", {S}}, {"business_ethics", "商业伦理", {SS}},
      {"chinese_civil_service_exam", "中国公务员考试", {SS, C}}, {"chinese_driving_rule", "中国驾驶规则", {O, C}},
      {"chinese_food_culture", "中国饮食文化", {SS, C}}, {"chinese_foreign_policy", "中国外交政策", {SS, C}},
      {"chinese_history", "中国历史", {H, C}}, {"chinese_literature", "中国文学", {H, C}},
      {"chinese_teacher_qualification", "中国教师资格", {SS, C}}, {"clinical_knowledge", "临床知识", {O}},
      {"college_actuarial_science", "大学精算学", {S}}, {"college_education", "大学教育学", {SS}},
      {"college_engineering_hydrology", "大学工程水文学", {S}}, {"college_law", "大学法律", {H}},
      {"college_mathematics", "大学数学", {S}}, {"college_medical_statistics", "大学医学统计", {S}},
      {"college_medicine", "大学医学", {O}}, {"computer_science", "计算机科学", {S}},
      {"computer_security", "计算机安全", {O}}, {"conceptual_physics", "概念物理学", {S}},
      {"construction_project_management", "建设工程管理", {O, C}}, {"economics", "经济学", {SS}},
      {"education", "教育学", {SS}}, {"electrical_engineering", "电气工程", {S}},
      {"elementary_chinese", "小学语文", {SS, C}}, {"elementary_commonsense", "小学常识", {O, C}},
      {"elementary_information_and_technology", "小学信息技术", {O}}, {"elementary_mathematics", "初等数学", {S}},
      {"ethnology", "民族学", {SS, C}}, {"food_science", "食品科学", {O}}, {"genetics", "遗传学", {S}},
      {"global_facts", "全球事实", {H}}, {"high_school_biology", "高中生物", {S}},
      {"high_school_chemistry", "高中化学", {S}}, {"high_school_geography", "高中地理", {SS}},
      {"high_school_mathematics", "高中数学", {S}}, {"high_school_physics", "高中物理学", {S}},
      {"high_school_politics", "高中政治", {SS, C}}, {"human_sexuality", "人类性行为", {O}},
      {"international_law", "国际法学", {H}}, {"journalism", "新闻学", {SS}}, {"jurisprudence", "法理学", {H}},
      {"legal_and_moral_basis", "法律与道德基础", {O}}, {"logical", "逻辑学", {H}},
      {"machine_learning", "机器学习", {S}}, {"management", "管理学", {SS}}, {"marketing", "市场营销", {SS}},
      {"marxist_theory", "马克思主义理论", {H}}, {"modern_chinese", "现代汉语", {SS, C}},
      {"nutrition", "营养学", {O}}, {"philosophy", "哲学", {H}}, {"professional_accounting", "专业会计", {SS}},
      {"professional_law", "专业法学", {H}}, {"professional_medicine", "专业医学", {O}},
      {"professional_psychology", "专业心理学", {SS}}, {"public_relations", "公共关系", {SS}},
      {"security_study", "安全研究", {SS}}, {"sociology", "社会学", {SS}}, {"sports_science", "体育学", {O}},
      {"traditional_chinese_medicine", "中医中药", {O, C}}, {"virology", "病毒学", {S}},
      {"world_history", "世界历史", {H}}, {"world_religions", "世界宗教", {H}},
  };
  return t;
}

const std::vector<SubjectRow>& subject_table(Task t) {
  switch (t) {
    case Task::mmlu: return mmlu_subjects();
    case Task::ceval: return ceval_subjects();
    case Task::cmmlu: return cmmlu_subjects();
  }
  CHECK(false);
}

// ---- file layout ----

// The dev / scored file of a subject, relative to the root.
std::string dev_file(Task t, const std::string& subject) {
  return t == Task::cmmlu ? "dev/" + subject + ".csv" : "dev/" + subject + "_dev.csv";
}
std::string scored_file(Task t, const std::string& subject) {
  const std::string split = scored_split(t);
  return t == Task::cmmlu ? split + "/" + subject + ".csv" : fmt::format("{}/{}_{}.csv", split, subject, split);
}
// The subject a scored file's name stands for ("" when the name does not fit the layout).
std::string subject_of(Task t, const std::string& filename) {
  const std::string suffix = t == Task::cmmlu ? ".csv" : fmt::format("_{}.csv", scored_split(t));
  if (filename.size() <= suffix.size() || !filename.ends_with(suffix)) return "";
  return filename.substr(0, filename.size() - suffix.size());
}

const char* layout_hint(Task t) {
  switch (t) {
    case Task::mmlu:
      return "MMLU is hendrycks/test's data.tar (people.eecs.berkeley.edu/~hendrycks/data.tar): give the folder "
             "holding data/ or data itself, with dev/<subject>_dev.csv and test/<subject>_test.csv";
    case Task::ceval:
      return "C-Eval is ceval-exam.zip (huggingface.co/datasets/ceval/ceval-exam): give the folder it unpacks "
             "into, with dev/<subject>_dev.csv and val/<subject>_val.csv";
    case Task::cmmlu:
      return "CMMLU is cmmlu_v1_0_1.zip (huggingface.co/datasets/haonan-li/cmmlu): give the folder it unpacks "
             "into, with dev/<subject>.csv and test/<subject>.csv";
  }
  return "";
}

// MMLU's archive unpacks to data/; accept the folder above it too.
std::string find_root(Task t, const std::string& dir) {
  if (!is_directory(dir)) fail("--data {}: no such folder\nhint: {}", dir, layout_hint(t));
  const std::string split = scored_split(t);
  if (is_directory(dir + "/" + split)) return dir;
  if (t == Task::mmlu && is_directory(dir + "/data/" + split)) return dir + "/data";
  fail("--data {}: no {}/ folder in it{}, expected {}'s layout\nhint: {}", dir, split,
       t == Task::mmlu ? " (nor in data/)" : "", task_title(t), layout_hint(t));
}

std::vector<std::string> subjects_in(Task t, const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root + "/" + scored_split(t))) {
    const std::string s = subject_of(t, e.path().filename().string());
    if (!s.empty() && e.is_regular_file()) out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  if (out.empty())
    fail("{}/{}: no {} files, expected {}\nhint: {}", root, scored_split(t), t == Task::cmmlu ? std::string("*.csv") : fmt::format("*_{}.csv", scored_split(t)),
         scored_file(t, "<subject>"), layout_hint(t));
  return out;
}

const SubjectRow& find_subject(Task t, const std::string& name, const std::string& file) {
  for (const auto& row : subject_table(t))
    if (name == row.name) return row;
  fail("{}: '{}' is not one of {}'s {} subjects, expected the published file names\nhint: remove the file, or "
       "leave it out with --subjects",
       file, name, task_title(t), subject_table(t).size());
}

// ---- rows ----

// The columns of a header file holding question, A-D and answer (C-Eval: lower-case "question" and
// "answer"; CMMLU: "Question" and "Answer"), or the fixed MMLU positions.
struct Columns {
  int question = 0, a = 1, answer = 5;
  size_t count = 6;
};

Columns header_columns(Task t, const CsvRecord& header, const std::string& path) {
  const char* q = t == Task::ceval ? "question" : "Question";
  const char* ans = t == Task::ceval ? "answer" : "Answer";
  const std::string expected =
      t == Task::ceval ? "id,question,A,B,C,D,answer[,explanation]" : ",Question,A,B,C,D,Answer";
  auto find = [&](const std::string& name) {
    for (size_t i = 0; i < header.fields.size(); i++)
      if (header.fields[i] == name) return int(i);
    fail("{}:{}: the header has no '{}' column, expected {}\nhint: {}", path, header.line, name, expected,
         layout_hint(t));
  };
  Columns c;
  c.question = find(q);
  c.a = find("A");
  for (int k = 1; k < 4; k++)
    if (find(std::string(1, char('A' + k))) != c.a + k)
      fail("{}:{}: columns A, B, C, D are not side by side, expected {}", path, header.line, expected);
  c.answer = find(ans);
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

std::vector<Question> read_subject_file(Task t, const std::string& path, const std::string& role) {
  if (!is_regular_file(path))
    fail("{}: no such file ({})\nhint: {}{}", path, role, layout_hint(t),
         role.starts_with("few-shot") ? "; or score without examples: --shots 0" : "");
  return read_questions(t, path);
}

}  // namespace

Task parse_task(const std::string& name) {
  if (name == "mmlu") return Task::mmlu;
  if (name == "ceval") return Task::ceval;
  if (name == "cmmlu") return Task::cmmlu;
  fail("--task {}: unknown benchmark, expected mmlu, ceval or cmmlu", name);
}

const char* task_name(Task t) { return t == Task::mmlu ? "mmlu" : t == Task::ceval ? "ceval" : "cmmlu"; }
const char* task_title(Task t) { return t == Task::mmlu ? "MMLU" : t == Task::ceval ? "C-Eval" : "CMMLU"; }
const char* scored_split(Task t) { return t == Task::ceval ? "val" : "test"; }

const std::vector<std::string>& task_categories(Task t) {
  static const std::vector<std::string> mmlu = {"STEM", "humanities", "social sciences", "other"};
  static const std::vector<std::string> ceval = {"STEM", "Social Science", "Humanities", "Other"};
  static const std::vector<std::string> cmmlu = {"STEM", "Humanities", "Social Science", "Other", "China specific"};
  return t == Task::mmlu ? mmlu : t == Task::ceval ? ceval : cmmlu;
}

int64_t Benchmark::num_questions() const {
  int64_t n = 0;
  for (const auto& s : subjects) n += int64_t(s.questions.size());
  return n;
}

std::vector<Question> read_questions(Task t, const std::string& path) {
  const std::vector<CsvRecord> records = read_csv(path);
  std::vector<Question> out;
  size_t first = 0;
  Columns columns;
  if (t != Task::mmlu) {
    if (records.empty()) fail("{}: empty, expected a header line and questions\nhint: {}", path, layout_hint(t));
    columns = header_columns(t, records[0], path);
    first = 1;
  }
  for (size_t i = first; i < records.size(); i++) out.push_back(question_of(records[i], columns, path));
  if (out.empty()) fail("{}: no questions, expected at least one row\nhint: {}", path, layout_hint(t));
  return out;
}

Benchmark load_benchmark(Task t, const std::string& dir, const std::vector<std::string>& only, bool read_dev) {
  Benchmark b{t, find_root(t, dir), {}};
  std::vector<std::string> names = subjects_in(t, b.root);
  if (!only.empty()) {
    for (const auto& s : only)
      if (std::find(names.begin(), names.end(), s) == names.end())
        fail("--subjects {}: no {} in {}/{}, expected one of: {}", s, scored_file(t, s), b.root, scored_split(t),
             fmt::join(names, ", "));
    names = only;
  }
  for (const auto& name : names) {
    const std::string scored = b.root + "/" + scored_file(t, name);
    const SubjectRow& row = find_subject(t, name, scored);
    Subject s;
    s.name = name;
    s.categories = row.categories;
    if (row.zh) {
      s.title = row.zh;
    } else {
      s.title = name;
      std::replace(s.title.begin(), s.title.end(), '_', ' ');
    }
    s.questions = read_subject_file(t, scored, fmt::format("the {} questions of {}", scored_split(t), name));
    if (read_dev) s.dev = read_subject_file(t, b.root + "/" + dev_file(t, name), "few-shot examples of " + name);
    b.subjects.push_back(std::move(s));
  }
  return b;
}

}  // namespace llamatrain::eval
