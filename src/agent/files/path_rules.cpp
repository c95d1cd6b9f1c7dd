#include "agent/files/path_rules.h"

#include <fmt/format.h>

namespace cnlab::agent::detail {

std::optional<std::string> upload_path_problem(std::string_view path) {
  if (path.empty()) return "is empty";
  if (path.size() > kMaxUploadPathBytes) {
    return fmt::format("is longer than {} bytes ({})", kMaxUploadPathBytes, path.size());
  }
  if (path.find('\0') != std::string_view::npos) return std::string("contains NUL");
  if (path.find('\\') != std::string_view::npos) return std::string("contains a backslash");
  if (path.front() == '/') return std::string("is absolute, not relative");
  size_t count = 0;
  for (std::string_view part : path_segments(path)) {
    ++count;
    if (part.empty()) return std::string("has an empty segment");
    if (part == "." || part == "..") return std::string("has a \".\" or \"..\" segment");
  }
  if (count > kMaxUploadPathSegments) {
    return fmt::format("has more than {} segments ({})", kMaxUploadPathSegments, count);
  }
  return std::nullopt;
}

std::optional<std::string> clean_entry_path(std::string_view raw, std::string* problem) {
  if (raw.empty()) {
    *problem = "has an empty name";
    return std::nullopt;
  }
  if (raw.front() == '/') {
    *problem = "is an absolute path; entries must be relative to the workspace";
    return std::nullopt;
  }
  while (raw.starts_with("./")) raw.remove_prefix(2);
  if (raw == ".") raw = {};
  while (raw.ends_with('/')) raw.remove_suffix(1);
  if (raw.empty()) return std::string();
  for (std::string_view part : path_segments(raw)) {
    if (part == "..") {
      *problem = "has a \"..\" segment; entries must stay inside the workspace";
      return std::nullopt;
    }
    if (part.empty() || part == ".") {
      *problem = "has an empty or \".\" segment in the middle";
      return std::nullopt;
    }
  }
  return std::string(raw);
}

std::optional<std::string> symlink_target_problem(std::string_view link_path, std::string_view target) {
  if (target.empty()) return std::string("has an empty target");
  if (target.front() == '/') {
    return fmt::format("points to the absolute path \"{}\", outside the workspace", shown(target));
  }
  size_t depth = path_segments(link_path).size() - 1;  // directories above the link, below the root
  size_t climbs = 0;
  bool named = false;
  for (std::string_view part : path_segments(target)) {
    if (part == "..") {
      if (named) {
        return fmt::format("points to \"{}\": \"..\" after a name could climb out through a link; only "
                           "leading \"..\" are allowed",
                           shown(target));
      }
      if (++climbs > depth) return fmt::format("points to \"{}\", outside the workspace", shown(target));
    } else if (!part.empty() && part != ".") {
      named = true;
    }
  }
  return std::nullopt;
}

std::vector<std::string_view> path_segments(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      parts.push_back(path.substr(start));
      return parts;
    }
    parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
}

std::string shown(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < 256; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > 256) out += "...";
  return out;
}

std::string human_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {} ({} bytes)", value, kUnits[unit], bytes);
}

}  // namespace cnlab::agent::detail
