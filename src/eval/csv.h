// RFC 4180 CSV records, as the benchmark files (MMLU, C-Eval, CMMLU) are published: fields separated
// by commas, records by LF or CRLF, a field in double quotes may hold commas, line breaks and doubled
// quotes (""), a UTF-8 byte order mark at the start is skipped, and empty lines are skipped (as
// pandas does). Quoted fields keep their bytes as written (a CRLF inside quotes stays CRLF).
// Unquoted fields are taken as they are, a stray quote inside one included. An unterminated quote
// or text after a closing quote is an Error naming the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llamatrain::eval {

struct CsvRecord {
  std::vector<std::string> fields;
  int64_t line = 0;  // 1-based line of the file where the record starts
};

// `name` stands for the text's file in messages.
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& name);
// The whole file (Error naming it when it cannot be read).
std::vector<CsvRecord> read_csv(const std::string& path);

}  // namespace llamatrain::eval
