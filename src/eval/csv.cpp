// RFC 4180 parsing: one pass over the bytes, a record at a time, counting lines for messages.
#include "eval/csv.h"

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::eval {

namespace {

constexpr size_t kMaxCsvBytes = size_t(1) << 30;

class CsvParser {
 public:
  CsvParser(std::string_view text, const std::string& name) : s_(text), name_(name) {
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") i_ = 3;  // UTF-8 byte order mark
  }

  bool next(CsvRecord* r) {
    skip_empty_lines();
    if (i_ >= s_.size()) return false;
    r->fields.clear();
    r->line = line_;
    while (true) {
      r->fields.push_back(at('"') ? quoted_field() : plain_field());
      if (at(',')) {
        i_++;
        continue;
      }
      end_of_record();
      return true;
    }
  }

 private:
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  bool at_line_end() const { return i_ >= s_.size() || s_[i_] == '\n' || s_.substr(i_, 2) == "\r\n"; }

  void skip_empty_lines() {
    while (i_ < s_.size() && at_line_end()) {
      i_ += s_[i_] == '\r' ? 2 : 1;
      line_++;
    }
  }
  void end_of_record() {
    if (i_ >= s_.size()) return;
    i_ += s_[i_] == '\r' ? 2 : 1;
    line_++;
  }

  std::string plain_field() {
    const size_t begin = i_;
    while (i_ < s_.size() && s_[i_] != ',' && !at_line_end()) i_++;
    return std::string(s_.substr(begin, i_ - begin));
  }

  // From the opening quote to the closing one: "" is one quote, line breaks are kept.
  std::string quoted_field() {
    const int64_t open_line = line_;
    i_++;
    std::string out;
    while (true) {
      if (i_ >= s_.size())
        fail("{}:{}: a quoted field is never closed (the file ends inside it)\nhint: every \" that opens a field "
             "needs a closing \"; a quote inside a quoted field is written \"\"",
             name_, open_line);
      const char c = s_[i_++];
      if (c == '"') {
        if (at('"')) {
          out += '"';
          i_++;
          continue;
        }
        break;
      }
      if (c == '\n') line_++;
      out += c;
    }
    if (!at(',') && !at_line_end())
      fail("{}:{}: text after the closing quote of a field, expected a comma or the end of the line\nhint: a quote "
           "inside a quoted field is written \"\"",
           name_, line_);
    return out;
  }

  std::string_view s_;
  const std::string& name_;
  size_t i_ = 0;
  int64_t line_ = 1;
};

}  // namespace

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& name) {
  CsvParser p(text, name);
  std::vector<CsvRecord> out;
  CsvRecord r;
  while (p.next(&r)) out.push_back(r);
  return out;
}

std::vector<CsvRecord> read_csv(const std::string& path) {
  return parse_csv(read_small_file(path, kMaxCsvBytes, "CSV file"), path);
}

}  // namespace llamatrain::eval
