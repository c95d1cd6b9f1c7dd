#include "agent/files/ignore_rules.h"

#include <cctype>
#include <cstring>

namespace cnlab::agent {
namespace {

bool in_named_class(std::string_view name, unsigned char c) {
  if (name == "alnum") return std::isalnum(c);
  if (name == "alpha") return std::isalpha(c);
  if (name == "blank") return c == ' ' || c == '\t';
  if (name == "cntrl") return std::iscntrl(c);
  if (name == "digit") return std::isdigit(c);
  if (name == "graph") return std::isgraph(c);
  if (name == "lower") return std::islower(c);
  if (name == "print") return std::isprint(c);
  if (name == "punct") return std::ispunct(c);
  if (name == "space") return std::isspace(c);
  if (name == "upper") return std::isupper(c);
  if (name == "xdigit") return std::isxdigit(c);
  return false;
}

// git's wildmatch with WM_PATHNAME. Backtracking over '*' is memoised per (pattern, text) position,
// so a hostile pattern ("*a*a*a*a*b") costs pattern x text steps, not an exponential search;
// recursion is at most pattern + text deep (paths are at most a few KiB).
class Glob {
 public:
  Glob(std::string_view pattern, std::string_view text)
      : p_(pattern), t_(text), memo_((pattern.size() + 1) * (text.size() + 1), kUnknown) {}

  bool match(size_t pi, size_t ti) {
    int8_t& known = memo_[pi * (t_.size() + 1) + ti];
    if (known != kUnknown) return known == 1;
    bool result = match_uncached(pi, ti);
    known = result ? 1 : 0;
    return result;
  }

 private:
  static constexpr int8_t kUnknown = -1;

  bool match_uncached(size_t pi, size_t ti) {
    while (pi < p_.size()) {
      char c = p_[pi];
      if (c == '*') return match_stars(pi, ti);
      if (ti >= t_.size()) return false;
      char t = t_[ti];
      if (c == '?') {
        if (t == '/') return false;
      } else if (c == '[') {
        size_t end = 0;
        if (t == '/' || !match_class(pi, static_cast<unsigned char>(t), &end)) return false;
        pi = end;
        ++ti;
        continue;
      } else if (c == '\\') {
        if (pi + 1 >= p_.size()) return false;  // a trailing backslash matches nothing, as in git
        ++pi;
        if (t != p_[pi]) return false;
      } else if (c != t) {
        return false;
      }
      ++pi;
      ++ti;
    }
    return ti == t_.size();
  }

  // Each state (pi, ti) either lets the stars match nothing more or eats one more character (one
  // more directory for "**/") and asks the same state one step on: O(1) work per memoised state.
  bool match_stars(size_t pi, size_t ti) {
    size_t after = pi;
    while (after < p_.size() && p_[after] == '*') ++after;
    bool spans_directories = after - pi >= 2 && (pi == 0 || p_[pi - 1] == '/') &&
                             (after == p_.size() || p_[after] == '/');
    if (spans_directories) {
      if (after == p_.size()) return true;  // "x/**": everything below
      size_t rest = after + 1;              // "**/": zero or more leading directories
      if (match(rest, ti)) return true;
      size_t slash = t_.find('/', ti);
      return slash != std::string_view::npos && match(pi, slash + 1);
    }
    if (match(after, ti)) return true;
    return ti < t_.size() && t_[ti] != '/' && match(pi, ti + 1);
  }

  // "[...]" at `pi`; sets `end` past its ']'. A class without a closing ']' matches nothing.
  bool match_class(size_t pi, unsigned char t, size_t* end) {
    size_t j = pi + 1;
    bool negated = false;
    if (j < p_.size() && (p_[j] == '!' || p_[j] == '^')) {
      negated = true;
      ++j;
    }
    bool matched = false;
    bool first = true;
    int previous = -1;  // the last single character, for a following range
    while (true) {
      if (j >= p_.size()) return false;
      auto ch = static_cast<unsigned char>(p_[j]);
      if (ch == ']' && !first) break;
      first = false;
      if (ch == '\\') {
        if (++j >= p_.size()) return false;
        ch = static_cast<unsigned char>(p_[j]);
        matched = matched || ch == t;
        previous = ch;
        ++j;
        continue;
      }
      if (ch == '-' && previous >= 0 && j + 1 < p_.size() && p_[j + 1] != ']') {
        ++j;
        if (p_[j] == '\\' && j + 1 < p_.size()) ++j;
        auto high = static_cast<unsigned char>(p_[j]);
        matched = matched || (t >= previous && t <= high);
        previous = -1;
        ++j;
        continue;
      }
      if (ch == '[' && j + 1 < p_.size() && p_[j + 1] == ':') {
        size_t close = p_.find(":]", j + 2);
        if (close != std::string_view::npos) {
          matched = matched || in_named_class(p_.substr(j + 2, close - j - 2), t);
          previous = -1;
          j = close + 2;
          continue;
        }
      }
      matched = matched || ch == t;
      previous = ch;
      ++j;
    }
    *end = j + 1;
    return matched != negated;
  }

  std::string_view p_;
  std::string_view t_;
  std::vector<int8_t> memo_;
};

// Drops trailing spaces that are not escaped with a backslash.
std::string_view trim_trailing_spaces(std::string_view line) {
  size_t keep = 0;  // length up to the last character that is not an unescaped trailing space
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) {
      ++i;
      keep = i + 1;
    } else if (line[i] != ' ') {
      keep = i + 1;
    }
  }
  return line.substr(0, keep);
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) { return Glob(pattern, text).match(0, 0); }

void IgnoreRules::add(std::string_view base_dir, std::string_view text, IgnoreSource source) {
  RuleFile file;
  if (!base_dir.empty()) {
    file.base = std::string(base_dir);
    if (file.base.back() != '/') file.base.push_back('/');
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t newline = text.find('\n', start);
    std::string_view line = text.substr(start, newline == std::string_view::npos ? std::string_view::npos : newline - start);
    start = newline == std::string_view::npos ? text.size() + 1 : newline + 1;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    line = trim_trailing_spaces(line);
    Rule rule;
    if (line.starts_with('!')) {
      rule.negated = true;
      line.remove_prefix(1);
    }
    if (line.ends_with('/') && !line.ends_with("\\/")) {
      rule.dir_only = true;
      line.remove_suffix(1);
    }
    if (line.find('/') != std::string_view::npos) rule.anchored = true;
    if (line.starts_with('/')) line.remove_prefix(1);
    if (line.empty()) continue;
    rule.pattern = std::string(line);
    file.rules.push_back(std::move(rule));
  }
  if (file.rules.empty()) return;
  (source == IgnoreSource::kGitignore ? git_ : cnlab_).push_back(std::move(file));
}

int IgnoreRules::verdict(const std::vector<RuleFile>& files, std::string_view path, std::string_view name,
                         bool is_dir) {
  for (auto file = files.rbegin(); file != files.rend(); ++file) {
    if (!file->base.empty() && (path.size() <= file->base.size() || !path.starts_with(file->base))) continue;
    std::string_view below = path.substr(file->base.size());
    for (auto rule = file->rules.rbegin(); rule != file->rules.rend(); ++rule) {
      if (rule->dir_only && !is_dir) continue;
      if (glob_match(rule->pattern, rule->anchored ? below : name)) return rule->negated ? 0 : 1;
    }
  }
  return -1;
}

bool IgnoreRules::matches(std::string_view path, bool is_dir) const {
  size_t slash = path.rfind('/');
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  int v = verdict(cnlab_, path, name, is_dir);
  if (v < 0) v = verdict(git_, path, name, is_dir);
  return v == 1;
}

bool IgnoreRules::ignored(std::string_view path, bool is_dir) const {
  for (size_t slash = path.find('/'); slash != std::string_view::npos; slash = path.find('/', slash + 1)) {
    if (matches(path.substr(0, slash), /*is_dir=*/true)) return true;
  }
  return matches(path, is_dir);
}

}  // namespace cnlab::agent
