#include "cli/output.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace cnlab::cli {

Result<OutputFormat> parse_output_format(std::string_view text, bool allow_name) {
  if (text.empty() || text == "table") return OutputFormat::kTable;
  if (text == "json") return OutputFormat::kJson;
  if (allow_name && text == "name") return OutputFormat::kName;
  return Error::invalid_argument("-o", std::string(text),
                                 allow_name ? "unknown output format; expected table, json or name"
                                            : "unknown output format; expected table or json");
}

void add_output_option(CLI::App& command, std::string& value, bool allow_name) {
  command.add_option("-o,--output", value,
                     allow_name ? "Output format: table (default), json (the server's JSON) or name (ids only)"
                                : "Output format: table (default) or json (the server's JSON)");
}

bool colour_enabled(FILE* stream) {
  if (!::isatty(::fileno(stream))) return false;
  const char* no_colour = std::getenv("NO_COLOR");
  if (no_colour && *no_colour) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

int terminal_width(FILE* stream) {
  if (!::isatty(::fileno(stream))) return 0;
  winsize size{};
  if (::ioctl(::fileno(stream), TIOCGWINSZ, &size) != 0) return 0;
  return size.ws_col;
}

std::string colourise(std::string_view text, const char* sgr) {
  if (!sgr || !*sgr) return std::string(text);
  std::string out;
  out.reserve(text.size() + 10);
  out += "\033[";
  out += sgr;
  out += 'm';
  out += text;
  out += "\033[0m";
  return out;
}

size_t display_width(std::string_view text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0x1b && i + 1 < text.size() && text[i + 1] == '[') {
      // CSI: parameters and intermediates up to a final byte in @..~.
      i += 2;
      while (i < text.size() && !(text[i] >= '@' && text[i] <= '~')) ++i;
      continue;
    }
    if ((c & 0xC0) != 0x80) ++width;
  }
  return width;
}

namespace {

// The first `width` columns of plain `text` followed by "…" (itself one column).
std::string cut(std::string_view text, size_t width) {
  if (width == 0) return "";
  size_t columns = 0, i = 0;
  for (; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) continue;
    if (columns == width - 1) break;
    ++columns;
  }
  return std::string(text.substr(0, i)) + "…";
}

void pad(std::string& out, size_t n) { out.append(n, ' '); }

}  // namespace

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::row() {
  while (filled_ != 0 && filled_ < columns_.size()) cell("");
  filled_ = 0;
}

void Table::cell(std::string text, const char* sgr) {
  if (filled_ == columns_.size()) row();  // a caller that forgot row() starts a new one
  if (filled_ == 0) cells_.resize(cells_.size() + columns_.size());
  Cell& c = cells_[cells_.size() - columns_.size() + filled_];
  c.text = std::move(text);
  c.sgr = sgr;
  ++filled_;
}

std::string Table::render(bool colour, int max_width) const {
  const size_t n = columns_.size();
  const size_t row_count = rows();
  std::vector<size_t> width(n);
  for (size_t c = 0; c < n; ++c) width[c] = display_width(columns_[c].header);
  for (size_t r = 0; r < row_count; ++r) {
    for (size_t c = 0; c < n; ++c) width[c] = std::max(width[c], display_width(cells_[r * n + c].text));
  }
  // Trailing empty columns still take their header's width; the last column is not padded.
  if (max_width > 0) {
    size_t total = 2 * (n - 1);
    for (size_t w : width) total += w;
    while (total > static_cast<size_t>(max_width)) {
      size_t widest = n;
      for (size_t c = 0; c < n; ++c) {
        if (columns_[c].truncatable && width[c] > 8 && (widest == n || width[c] > width[widest])) widest = c;
      }
      if (widest == n) break;
      size_t shrink = std::min(width[widest] - 8, total - static_cast<size_t>(max_width));
      width[widest] -= shrink;
      total -= shrink;
    }
  }

  std::string out;
  size_t line = 2 * n;
  for (size_t w : width) line += w;
  out.reserve((row_count + 1) * (line + 1) + (colour ? row_count * n * 4 : 0));
  auto put = [&](std::string_view text, const char* sgr, size_t c, bool last) {
    size_t w = display_width(text);
    std::string cut_text;
    if (w > width[c]) {
      cut_text = cut(text, width[c]);
      text = cut_text;
      w = width[c];
    }
    bool right = columns_[c].align == Align::kRight;
    if (right) pad(out, width[c] - w);
    bool paint = colour && sgr && *sgr && !text.empty();
    if (paint) {
      out += "\033[";
      out += sgr;
      out += 'm';
    }
    out += text;
    if (paint) out += "\033[0m";
    if (!right && !last) pad(out, width[c] - w);
    if (!last) out += "  ";
  };
  auto end_line = [&] {
    while (!out.empty() && out.back() == ' ') out.pop_back();  // empty trailing cells leave no blanks
    out += '\n';
  };
  for (size_t c = 0; c < n; ++c) put(columns_[c].header, colour ? kBold : nullptr, c, c + 1 == n);
  end_line();
  for (size_t r = 0; r < row_count; ++r) {
    for (size_t c = 0; c < n; ++c) put(cells_[r * n + c].text, cells_[r * n + c].sgr, c, c + 1 == n);
    end_line();
  }
  return out;
}

void Table::print(FILE* stream) const {
  std::string text = render(colour_enabled(stream), terminal_width(stream));
  std::fwrite(text.data(), 1, text.size(), stream);
}

std::string format_age(Duration duration) {
  int64_t s = duration.count();
  if (s < 0) s = 0;
  auto two = [](int64_t major, const char* a, int64_t minor, const char* b) {
    std::string out = std::to_string(major) + a;
    if (minor) out += std::to_string(minor) + b;
    return out;
  };
  if (s < 60) return std::to_string(s) + "s";
  if (s < 10 * 60) return two(s / 60, "m", s % 60, "s");
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 10 * 3600) return two(s / 3600, "h", s % 3600 / 60, "m");
  if (s < 48 * 3600) return std::to_string(s / 3600) + "h";
  if (s < 10 * 86400) return two(s / 86400, "d", s % 86400 / 3600, "h");
  return std::to_string(s / 86400) + "d";
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 0) return "-" + format_bytes(-bytes);
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  double tenths = std::round(value * 10) / 10;
  if (tenths >= 100 || tenths == std::floor(tenths)) {
    std::snprintf(text, sizeof text, "%.0f %s", std::round(value), kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", tenths, kUnits[unit]);
  }
  return text;
}

std::string format_time(Time time, Time now) {
  if (time == Time{}) return "-";
  return format_time_near(time, now);
}

Time now_seconds() { return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()); }

std::string count_of(int64_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

int64_t drain_jobs_left(const Json& node_status) {
  return node_status.value("bound_jobs", int64_t{0}) + node_status.value("releasing_jobs", int64_t{0}) +
         node_status.value("migrating_jobs", int64_t{0});
}

}  // namespace cnlab::cli
