// How the client commands print: `-o table|json|name`, human tables, colour only on a terminal,
// and the short forms people read ("3m12s", "4.1 KiB"). Any client command may include this.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "common/time.h"

namespace cnlab::cli {

// -o table (the default, for people), -o json (the server's JSON, for scripts), -o name (one id
// per line, for shell loops and completion).
enum class OutputFormat { kTable, kJson, kName };

// Parses the value of `-o`; the error (kInvalidArgument, exit 2) names `-o` and lists the formats
// allowed. `allow_name` is false for commands that print no ids.
Result<OutputFormat> parse_output_format(std::string_view text, bool allow_name = true);
// Adds `-o,--output FORMAT` to `command`, writing into `value` (parse it in the callback).
void add_output_option(CLI::App& command, std::string& value, bool allow_name = true);

// Whether to colour what goes to `stream`: it is a terminal, NO_COLOR is unset or empty, and TERM
// is not "dumb" (https://no-color.org).
bool colour_enabled(FILE* stream);
// The width of the terminal `stream` writes to, or 0 when it is not one (or cannot tell).
int terminal_width(FILE* stream);

// SGR codes for Table cells and colourise().
inline constexpr const char* kGreen = "32";
inline constexpr const char* kYellow = "33";
inline constexpr const char* kRed = "31";
inline constexpr const char* kBlue = "34";
inline constexpr const char* kMagenta = "35";
inline constexpr const char* kCyan = "36";
inline constexpr const char* kDim = "2";
inline constexpr const char* kBold = "1";
// `text` wrapped in the SGR code `sgr` and a reset; `text` alone when `sgr` is null or empty.
std::string colourise(std::string_view text, const char* sgr);
// Columns a terminal uses for `text`: UTF-8 code points, ANSI escape sequences counting none.
size_t display_width(std::string_view text);

// A table of left- or right-aligned columns separated by two spaces, headers on top. Cells are
// copied in; rows are stored flat, so a table of 10,000 rows costs one allocation per long cell.
// Only when the table is wider than `max_width` are the truncatable columns cut (ending in "…"),
// widest first, down to 8 columns each.
class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
    bool truncatable = false;
  };

  explicit Table(std::vector<Column> columns);

  // Starts a new row; fill it with cell() calls, one per column in order (missing cells are empty).
  void row();
  // Appends a cell to the current row, in colour `sgr` (a code above, or null) when colour is on.
  // The text may itself hold ANSI escapes; they take no width.
  void cell(std::string text, const char* sgr = nullptr);
  size_t rows() const { return cells_.size() / columns_.size(); }

  // The whole table, each line ending in '\n'. `max_width` 0: never truncate.
  std::string render(bool colour, int max_width = 0) const;
  // Renders to `stream` with its colour and width.
  void print(FILE* stream = stdout) const;

 private:
  struct Cell {
    std::string text;
    const char* sgr = nullptr;
  };
  std::vector<Column> columns_;
  std::vector<Cell> cells_;  // row-major; always a whole number of rows
  size_t filled_ = 0;        // cells filled in the current row
};

// "45s", "3m12s", "42m", "2h5m", "27h", "3d4h", "12d": at most two units, the shortest that keeps
// the precision people care about at that scale. Negative durations print as "0s".
std::string format_age(Duration duration);
// "512 B", "4.1 KiB", "80 GiB": binary units, one decimal below 100 and only when not whole.
std::string format_bytes(int64_t bytes);
// "14:05" within a day of `now`, else "2026-12-03 14:05" (UTC); "-" for the epoch (unset).
std::string format_time(Time time, Time now);
// The client's clock, in the API's whole seconds.
Time now_seconds();
// "1 job", "3 jobs": `count` with `noun`, which takes an "s" unless the count is one.
std::string count_of(int64_t count, const std::string& noun);
// What a drain still waits for on a node, from its status as served: the jobs bound there
// (`bound_jobs`), those taken off it that are still stopping there (`releasing_jobs`) and those
// moved off it live that it holds frozen until they run on their target (`migrating_jobs`).
int64_t drain_jobs_left(const Json& node_status);

}  // namespace cnlab::cli
