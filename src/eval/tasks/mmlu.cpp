// MMLU (Hendrycks et al.), as hendrycks/test's data.tar unpacks: data/dev/<subject>_dev.csv and
// data/test/<subject>_test.csv, no header (question,A,B,C,D,answer). Subjects and categories from
// hendrycks/test categories.py (subcategory -> STEM / humanities / social sciences / other); the
// headline is the micro average, as its papers report it. Prompt: lm-evaluation-harness's mmlu.
#include "eval/task.h"

namespace llamatrain::eval {

namespace {

// The categories, as the subject table names them.
constexpr const char* S = "STEM";
constexpr const char* H = "humanities";
constexpr const char* SS = "social sciences";
constexpr const char* O = "other";

// The published subject table: file-name stem, the name the prompt uses, categories.
const std::vector<SubjectRow>& subjects() {
  static const std::vector<SubjectRow> table = {
      {"abstract_algebra", nullptr, {S}},
      {"anatomy", nullptr, {O}},
      {"astronomy", nullptr, {S}},
      {"business_ethics", nullptr, {O}},
      {"clinical_knowledge", nullptr, {O}},
      {"college_biology", nullptr, {S}},
      {"college_chemistry", nullptr, {S}},
      {"college_computer_science", nullptr, {S}},
      {"college_mathematics", nullptr, {S}},
      {"college_medicine", nullptr, {O}},
      {"college_physics", nullptr, {S}},
      {"computer_security", nullptr, {S}},
      {"conceptual_physics", nullptr, {S}},
      {"econometrics", nullptr, {SS}},
      {"electrical_engineering", nullptr, {S}},
      {"elementary_mathematics", nullptr, {S}},
      {"formal_logic", nullptr, {H}},
      {"global_facts", nullptr, {O}},
      {"high_school_biology", nullptr, {S}},
      {"high_school_chemistry", nullptr, {S}},
      {"high_school_computer_science", nullptr, {S}},
      {"high_school_european_history", nullptr, {H}},
      {"high_school_geography", nullptr, {SS}},
      {"high_school_government_and_politics", nullptr, {SS}},
      {"high_school_macroeconomics", nullptr, {SS}},
      {"high_school_mathematics", nullptr, {S}},
      {"high_school_microeconomics", nullptr, {SS}},
      {"high_school_physics", nullptr, {S}},
      {"high_school_psychology", nullptr, {SS}},
      {"high_school_statistics", nullptr, {S}},
      {"high_school_us_history", nullptr, {H}},
      {"high_school_world_history", nullptr, {H}},
      {"human_aging", nullptr, {O}},
      {"human_sexuality", nullptr, {SS}},
      {"international_law", nullptr, {H}},
      {"jurisprudence", nullptr, {H}},
      {"logical_fallacies", nullptr, {H}},
      {"machine_learning", nullptr, {S}},
      {"management", nullptr, {O}},
      {"marketing", nullptr, {O}},
      {"medical_genetics", nullptr, {O}},
      {"miscellaneous", nullptr, {O}},
      {"moral_disputes", nullptr, {H}},
      {"moral_scenarios", nullptr, {H}},
      {"nutrition", nullptr, {O}},
      {"philosophy", nullptr, {H}},
      {"prehistory", nullptr, {H}},
      {"professional_accounting", nullptr, {O}},
      {"professional_law", nullptr, {H}},
      {"professional_medicine", nullptr, {O}},
      {"professional_psychology", nullptr, {SS}},
      {"public_relations", nullptr, {SS}},
      {"security_studies", nullptr, {SS}},
      {"sociology", nullptr, {SS}},
      {"us_foreign_policy", nullptr, {SS}},
      {"virology", nullptr, {O}},
      {"world_religions", nullptr, {H}},
  };
  return table;
}

}  // namespace

const Task& mmlu_task() {
  static const Task task{
      .name = "mmlu",
      .title = "MMLU",
      .split = "test",
      .split_in_file_names = true,
      .inner_folder = "data",
      .question_column = "",
      .answer_column = "",
      .header = "question,A,B,C,D,answer (no header line)",
      .layout_hint = "MMLU is hendrycks/test's data.tar (people.eecs.berkeley.edu/~hendrycks/data.tar): give the "
                     "folder holding data/ or data itself, with dev/<subject>_dev.csv and test/<subject>_test.csv",
      .note = "",
      .description = "The following are multiple choice questions (with answers) about {}.\n\n",
      .answer_prompt = "\nAnswer:",
      .headline_macro = false,
      .categories = {S, H, SS, O},
      .subjects = subjects(),
  };
  return task;
}

}  // namespace llamatrain::eval
