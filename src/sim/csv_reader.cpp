#include "sim/csv_reader.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cnlab::sim {
namespace {

// Rows quoted back in errors are cut so that one bad line cannot flood a terminal.
constexpr size_t kMaxQuotedRow = 160;

std::string quoted_row(std::string_view row) {
  if (row.size() <= kMaxQuotedRow) return std::string(row);
  return std::string(row.substr(0, kMaxQuotedRow)) + "...";
}

std::string column_list(const std::vector<CsvColumn>& columns) {
  std::string out;
  for (const auto& c : columns) {
    if (!out.empty()) out += ",";
    out += c.required ? std::string(c.name) : fmt::format("[{}]", c.name);
  }
  return out;
}

}  // namespace

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Error::not_found(path, "", fmt::format("cannot open file: {}", std::strerror(errno)));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Error::invalid_argument(path, "", "cannot read file");
  return buffer.str();
}

CsvReader::CsvReader(std::string_view text, std::string file_label)
    : text_(text), file_label_(std::move(file_label)) {}

bool CsvReader::next_line(std::string_view& out) {
  if (offset_ >= text_.size()) return false;
  size_t end = text_.find('\n', offset_);
  if (end == std::string_view::npos) end = text_.size();
  out = text_.substr(offset_, end - offset_);
  if (!out.empty() && out.back() == '\r') out.remove_suffix(1);
  offset_ = end + 1;
  ++line_;
  return true;
}

Status CsvReader::read_header(std::vector<CsvColumn> columns) {
  columns_ = std::move(columns);
  position_.assign(columns_.size(), -1);
  std::string_view header;
  std::string allowed = column_list(columns_);
  if (!next_line(header) || trim(header).empty()) {
    return Error::invalid_argument(fmt::format("{}:1:header", file_label_), "",
                                   fmt::format("the file is empty; expected a header {}", allowed));
  }
  // A UTF-8 byte order mark is invisible in editors; accept it rather than report "unknown column".
  if (header.substr(0, 3) == "\xEF\xBB\xBF") header.remove_prefix(3);
  auto names = split(header, ',');
  width_ = names.size();
  for (size_t i = 0; i < names.size(); ++i) {
    std::string_view name = trim(names[i]);
    size_t id = 0;
    while (id < columns_.size() && columns_[id].name != name) ++id;
    if (id == columns_.size()) {
      return Error::invalid_argument(fmt::format("{}:1:header", file_label_), std::string(name),
                                     fmt::format("unknown column; allowed columns: {}", allowed));
    }
    if (position_[id] >= 0) {
      return Error::invalid_argument(fmt::format("{}:1:header", file_label_), std::string(name),
                                     "column appears twice; each column may appear once");
    }
    position_[id] = static_cast<int>(i);
  }
  for (size_t id = 0; id < columns_.size(); ++id) {
    if (columns_[id].required && position_[id] < 0) {
      return Error::invalid_argument(fmt::format("{}:1:header", file_label_), std::string(header),
                                     fmt::format("required column {} is missing; expected columns: {}",
                                                 columns_[id].name, allowed));
    }
  }
  return Status::ok();
}

bool CsvReader::next_row() {
  std::string_view line;
  while (next_line(line)) {
    if (trim(line).empty()) continue;
    row_ = line;
    cells_ = split(line, ',');
    return true;
  }
  return false;
}

Status CsvReader::check_width() const {
  if (cells_.size() == width_) return Status::ok();
  return Error::invalid_argument(
      row_field(), quoted_row(row_),
      fmt::format("row has {} columns but the header has {}; expected one value per column of: {}",
                  cells_.size(), width_, column_list(columns_)));
}

std::string_view CsvReader::cell(size_t id) const {
  int pos = position_[id];
  if (pos < 0 || static_cast<size_t>(pos) >= cells_.size()) return {};
  return trim(cells_[static_cast<size_t>(pos)]);
}

std::string CsvReader::field(size_t id) const {
  return fmt::format("{}:{}:{}", file_label_, line_, columns_[id].name);
}

std::string CsvReader::row_field() const { return fmt::format("{}:{}", file_label_, line_); }

Error CsvReader::bad(size_t id, std::string message) const {
  return Error::invalid_argument(field(id), std::string(cell(id)), std::move(message));
}

Result<int64_t> CsvReader::integer(size_t id, int64_t min, int64_t max) const {
  std::string_view text = cell(id);
  auto value = parse_int(text, field(id));
  if (!value || *value < min || *value > max) {
    return bad(id, fmt::format("{} must be a whole number {}..{}", columns_[id].name, min, max));
  }
  return *value;
}

Result<std::optional<int64_t>> CsvReader::optional_integer(size_t id, int64_t min, int64_t max) const {
  if (cell(id).empty()) return std::optional<int64_t>{};
  auto value = integer(id, min, max);
  if (!value) return value.error();
  return std::optional<int64_t>{*value};
}

Result<double> CsvReader::number(size_t id) const {
  auto value = parse_double(cell(id), field(id));
  if (!value) return bad(id, fmt::format("{} must be a number", columns_[id].name));
  return *value;
}

}  // namespace cnlab::sim
