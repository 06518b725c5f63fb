// CMMLU (Li et al.), as cmmlu_v1_0_1.zip unpacks: dev/<subject>.csv and test/<subject>.csv with the
// header ,Question,A,B,C,D,Answer. Subjects, Chinese names and categories from its categories.py
// (name_en2zh; a subject whose subcategories fall in two categories counts in both, as its results
// script does, "China specific" being one); the headline is the macro average. Prompt:
// lm-evaluation-harness's cmmlu.
#include "eval/task.h"

namespace llamatrain::eval {

namespace {

// The categories, as the subject table names them.
constexpr const char* S = "STEM";
constexpr const char* H = "Humanities";
constexpr const char* SS = "Social Science";
constexpr const char* O = "Other";
constexpr const char* C = "China specific";

// The published subject table: file-name stem, the name the prompt uses, categories.
const std::vector<SubjectRow>& subjects() {
  static const std::vector<SubjectRow> table = {
      {"agronomy", "农学", {O}},
      {"anatomy", "解剖学", {S}},
      {"ancient_chinese", "古汉语", {SS, C}},
      {"arts", "艺术学", {H}},
      {"astronomy", "天文学", {S}},
      {"business_ethics", "商业伦理", {SS}},
      {"chinese_civil_service_exam", "中国公务员考试", {SS, C}},
      {"chinese_driving_rule", "中国驾驶规则", {O, C}},
      {"chinese_food_culture", "中国饮食文化", {SS, C}},
      {"chinese_foreign_policy", "中国外交政策", {SS, C}},
      {"chinese_history", "中国历史", {H, C}},
      {"chinese_literature", "中国文学", {H, C}},
      {"chinese_teacher_qualification", "中国教师资格", {SS, C}},
      {"clinical_knowledge", "临床知识", {O}},
      {"college_actuarial_science", "大学精算学", {S}},
      {"college_education", "大学教育学", {SS}},
      {"college_engineering_hydrology", "大学工程水文学", {S}},
      {"college_law", "大学法律", {H}},
      {"college_mathematics", "大学数学", {S}},
      {"college_medical_statistics", "大学医学统计", {S}},
      {"college_medicine", "大学医学", {O}},
      {"computer_science", "计算机科学", {S}},
      {"computer_security", "计算机安全", {O}},
      {"conceptual_physics", "概念物理学", {S}},
      {"construction_project_management", "建设工程管理", {O, C}},
      {"economics", "经济学", {SS}},
      {"education", "教育学", {SS}},
      {"electrical_engineering", "电气工程", {S}},
      {"elementary_chinese", "小学语文", {SS, C}},
      {"elementary_commonsense", "小学常识", {O, C}},
      {"elementary_information_and_technology", "小学信息技术", {O}},
      {"elementary_mathematics", "初等数学", {S}},
      {"ethnology", "民族学", {SS, C}},
      {"food_science", "食品科学", {O}},
      {"genetics", "遗传学", {S}},
      {"global_facts", "全球事实", {H}},
      {"high_school_biology", "高中生物", {S}},
      {"high_school_chemistry", "高中化学", {S}},
      {"high_school_geography", "高中地理", {SS}},
      {"high_school_mathematics", "高中数学", {S}},
      {"high_school_physics", "高中物理学", {S}},
      {"high_school_politics", "高中政治", {SS, C}},
      {"human_sexuality", "人类性行为", {O}},
      {"international_law", "国际法学", {H}},
      {"journalism", "新闻学", {SS}},
      {"jurisprudence", "法理学", {H}},
      {"legal_and_moral_basis", "法律与道德基础", {O}},
      {"logical", "逻辑学", {H}},
      {"machine_learning", "机器学习", {S}},
      {"management", "管理学", {SS}},
      {"marketing", "市场营销", {SS}},
      {"marxist_theory", "马克思主义理论", {H}},
      {"modern_chinese", "现代汉语", {SS, C}},
      {"nutrition", "营养学", {O}},
      {"philosophy", "哲学", {H}},
      {"professional_accounting", "专业会计", {SS}},
      {"professional_law", "专业法学", {H}},
      {"professional_medicine", "专业医学", {O}},
      {"professional_psychology", "专业心理学", {SS}},
      {"public_relations", "公共关系", {SS}},
      {"security_study", "安全研究", {SS}},
      {"sociology", "社会学", {SS}},
      {"sports_science", "体育学", {O}},
      {"traditional_chinese_medicine", "中医中药", {O, C}},
      {"virology", "病毒学", {S}},
      {"world_history", "世界历史", {H}},
      {"world_religions", "世界宗教", {H}},
  };
  return table;
}

}  // namespace

const Task& cmmlu_task() {
  static const Task task{
      .name = "cmmlu",
      .title = "CMMLU",
      .split = "test",
      .split_in_file_names = false,
      .inner_folder = "",
      .question_column = "Question",
      .answer_column = "Answer",
      .header = ",Question,A,B,C,D,Answer",
      .layout_hint = "CMMLU is cmmlu_v1_0_1.zip (huggingface.co/datasets/haonan-li/cmmlu): give the folder it "
                     "unpacks into, with dev/<subject>.csv and test/<subject>.csv",
      .note = "",
      .description = "以下是关于{}的单项选择题，请直接给出正确答案的选项。\n\n",
      .answer_prompt = "\n答案：",
      .headline_macro = true,
      .categories = {S, H, SS, O, C},
      .subjects = subjects(),
  };
  return task;
}

}  // namespace llamatrain::eval
