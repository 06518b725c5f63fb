// C-Eval (Huang et al.), as ceval-exam.zip unpacks: dev/<subject>_dev.csv and val/<subject>_val.csv
// with the header id,question,A,B,C,D,answer[,explanation]; test/ has no answers, so val is the split
// scored. Subjects, Chinese names and categories from its subject_mapping.json (its clinical_medicine
// row names no category; the C-Eval paper lists it under Other); the headline is the macro average.
// Prompt: lm-evaluation-harness's ceval-valid.
#include "eval/task.h"

namespace llamatrain::eval {

namespace {

// The categories, as the subject table names them.
constexpr const char* S = "STEM";
constexpr const char* SS = "Social Science";
constexpr const char* H = "Humanities";
constexpr const char* O = "Other";

// The published subject table: file-name stem, the name the prompt uses, categories.
const std::vector<SubjectRow>& subjects() {
  static const std::vector<SubjectRow> table = {
      {"computer_network", "计算机网络", {S}},
      {"operating_system", "操作系统", {S}},
      {"computer_architecture", "计算机组成", {S}},
      {"college_programming", "大学编程", {S}},
      {"college_physics", "大学物理", {S}},
      {"college_chemistry", "大学化学", {S}},
      {"advanced_mathematics", "高等数学", {S}},
      {"probability_and_statistics", "概率统计", {S}},
      {"discrete_mathematics", "离散数学", {S}},
      {"electrical_engineer", "注册电气工程师", {S}},
      {"metrology_engineer", "注册计量师", {S}},
      {"high_school_mathematics", "高中数学", {S}},
      {"high_school_physics", "高中物理", {S}},
      {"high_school_chemistry", "高中化学", {S}},
      {"high_school_biology", "高中生物", {S}},
      {"middle_school_mathematics", "初中数学", {S}},
      {"middle_school_biology", "初中生物", {S}},
      {"middle_school_physics", "初中物理", {S}},
      {"middle_school_chemistry", "初中化学", {S}},
      {"veterinary_medicine", "兽医学", {S}},
      {"college_economics", "大学经济学", {SS}},
      {"business_administration", "工商管理", {SS}},
      {"marxism", "马克思主义基本原理", {SS}},
      {"mao_zedong_thought", "毛泽东思想和中国特色社会主义理论体系概论", {SS}},
      {"education_science", "教育学", {SS}},
      {"teacher_qualification", "教师资格", {SS}},
      {"high_school_politics", "高中政治", {SS}},
      {"high_school_geography", "高中地理", {SS}},
      {"middle_school_politics", "初中政治", {SS}},
      {"middle_school_geography", "初中地理", {SS}},
      {"modern_chinese_history", "近代史纲要", {H}},
      {"ideological_and_moral_cultivation", "思想道德修养与法律基础", {H}},
      {"logic", "逻辑学", {H}},
      {"law", "法学", {H}},
      {"chinese_language_and_literature", "中国语言文学", {H}},
      {"art_studies", "艺术学", {H}},
      {"professional_tour_guide", "导游资格", {H}},
      {"legal_professional", "法律职业资格", {H}},
      {"high_school_chinese", "高中语文", {H}},
      {"high_school_history", "高中历史", {H}},
      {"middle_school_history", "初中历史", {H}},
      {"civil_servant", "公务员", {O}},
      {"sports_science", "体育学", {O}},
      {"plant_protection", "植物保护", {O}},
      {"basic_medicine", "基础医学", {O}},
      {"clinical_medicine", "临床医学", {O}},
      {"urban_and_rural_planner", "注册城乡规划师", {O}},
      {"accountant", "注册会计师", {O}},
      {"fire_engineer", "注册消防工程师", {O}},
      {"environmental_impact_assessment_engineer", "环境影响评价工程师", {O}},
      {"tax_accountant", "税务师", {O}},
      {"physician", "医师资格", {O}},
  };
  return table;
}

}  // namespace

const Task& ceval_task() {
  static const Task task{
      .name = "ceval",
      .title = "C-Eval",
      .split = "val",
      .split_in_file_names = true,
      .inner_folder = "",
      .question_column = "question",
      .answer_column = "answer",
      .header = "id,question,A,B,C,D,answer[,explanation]",
      .layout_hint = "C-Eval is ceval-exam.zip (huggingface.co/datasets/ceval/ceval-exam): give the folder it "
                     "unpacks into, with dev/<subject>_dev.csv and val/<subject>_val.csv",
      .note = "C-Eval's test answers are not public: scoring the val split",
      .description = "以下是中国关于{}的单项选择题，请选出其中的正确答案。\n\n",
      .answer_prompt = "\n答案：",
      .headline_macro = true,
      .categories = {S, SS, H, O},
      .subjects = subjects(),
  };
  return task;
}

}  // namespace llamatrain::eval
