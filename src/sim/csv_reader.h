// A small reader for the simulator's comma-separated traces. Private to src/sim.
//
// The traces are plain CSV without quoting (the published openb files and CNLab's generic format
// never quote), so a row is split on every comma. Columns are found by their header name, which
// lets a file omit optional columns (openb_pod_list_multigpu20.csv has only five) and keeps every
// error pointing at FILE:LINE:COLUMN.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace cnlab::sim {

// Reads a whole file; the error names the path and the reason.
Result<std::string> read_text_file(const std::string& path);

struct CsvColumn {
  std::string_view name;
  bool required = true;
};

class CsvReader {
 public:
  // `file_label` names the file in errors (usually the path as the user gave it).
  CsvReader(std::string_view text, std::string file_label);

  // Reads the first line and maps `columns` onto it. Fails on an empty file, an unknown or repeated
  // column, or a missing required one; the message lists the allowed columns.
  Status read_header(std::vector<CsvColumn> columns);

  // Advances to the next non-blank row; false at the end of the text.
  bool next_row();
  // Fails when the current row has a different number of cells than the header.
  Status check_width() const;

  int line() const { return line_; }
  // The current row's cell for column `id` (its index in read_header's list), trimmed; "" when the
  // file has no such column.
  std::string_view cell(size_t id) const;
  bool has_column(size_t id) const { return position_[id] >= 0; }
  // "FILE:LINE:COLUMN", the field of an error about column `id` of the current row.
  std::string field(size_t id) const;
  std::string row_field() const;
  const std::string& file_label() const { return file_label_; }

  // Parsers for one cell of the current row. Errors carry field() and the cell's text and say
  // what is allowed.
  Result<int64_t> integer(size_t id, int64_t min, int64_t max) const;
  // Empty cell -> nullopt.
  Result<std::optional<int64_t>> optional_integer(size_t id, int64_t min, int64_t max) const;
  Result<double> number(size_t id) const;
  Error bad(size_t id, std::string message) const;

 private:
  std::string_view text_;
  std::string file_label_;
  size_t offset_ = 0;
  int line_ = 0;
  std::vector<CsvColumn> columns_;
  std::vector<int> position_;  // column id -> index in the row, -1 when absent
  size_t width_ = 0;
  std::string_view row_;
  std::vector<std::string_view> cells_;

  bool next_line(std::string_view& out);
};

}  // namespace cnlab::sim
