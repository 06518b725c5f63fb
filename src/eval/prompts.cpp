// Prompt strings of the benchmarks (see prompts.h for the layout and its source; each Task holds its words).
#include "eval/prompts.h"

#include <fmt/format.h>

#include "core/utf8.h"

namespace llamatrain::eval {

namespace {

// The code points Python's str.isspace() is true for (Unicode White_Space with bidi class WS, B or
// S, or category Zs): ASCII's \t \n \v \f \r, the separators \x1c-\x1f, space, NEL, NBSP and the
// Unicode spaces and line/paragraph separators.
bool python_space(uint32_t c) {
  return unicode_white_space(c) || (c >= 0x1C && c <= 0x1F);  // and the ASCII separators Python counts
}

// Whether the character at s[i] is a space, and its length (an invalid byte sequence: its maximal
// invalid subpart, never a space).
bool space_at(std::string_view s, size_t i, size_t* length) {
  size_t bad = 0;
  const size_t n = utf8_sequence(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i, &bad);
  *length = n > 0 ? n : bad;
  return n > 0 && python_space(utf8_decode_at(s, i));
}

std::string choice_letter(int choice) { return std::string(1, char('A' + choice)); }

}  // namespace

std::string python_strip(std::string_view s) {
  size_t begin = 0, end = 0, n = 0;  // [begin, end): from the first to past the last non-space character
  while (begin < s.size() && space_at(s, begin, &n)) begin += n;
  for (size_t i = begin; i < s.size(); i += n)
    if (!space_at(s, i, &n)) end = i + n;
  return std::string(s.substr(begin, end > begin ? end - begin : 0));
}

std::string prompt_description(const Task& t, const Subject& s) {
  return fmt::format(fmt::runtime(t.description), s.title);
}

std::string question_text(const Task& t, const Question& q) {
  std::string out = python_strip(q.question);
  for (int k = 0; k < 4; k++) out += fmt::format("\n{}. {}", choice_letter(k), q.choices[size_t(k)]);
  out += t.answer_prompt;
  return out;
}

std::string continuation(int choice) { return fmt::format(" {}", choice_letter(choice)); }

std::string build_context(const Task& t, const Subject& s, int shots, const Question& q) {
  std::string out = prompt_description(t, s);
  for (int i = 0; i < shots && i < int(s.dev.size()); i++) {
    const Question& shot = s.dev[size_t(i)];
    out += question_text(t, shot) + continuation(shot.answer) + "\n\n";
  }
  return out + question_text(t, q);
}

}  // namespace llamatrain::eval
