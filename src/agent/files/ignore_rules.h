// IgnoreRules: git's .gitignore semantics, for choosing what goes into a workspace archive.
//
// Each ignore file applies to the paths below the directory it sits in. Within its lines:
//   - blank lines and lines starting with '#' are skipped; "\#" and "\!" escape a leading # or !;
//     trailing spaces are dropped unless escaped ("\ "); a trailing '\r' (a CRLF file) is dropped;
//   - a leading '!' negates: the path is included again;
//   - a trailing '/' makes the rule match directories only;
//   - a '/' at the start or in the middle anchors the pattern to the ignore file's directory;
//     otherwise it matches a name at any depth below it;
//   - '*' and '?' match within one segment, "[...]" a class ("[!...]"/"[^...]" negated, ranges,
//     "[:alpha:]"-style classes), '\' escapes; "**/" at the start matches in every directory,
//     "/**" at the end everything inside, "/**/" zero or more directories; other "**" are '*'.
// Of the rules that match a path, the last one wins; rules of deeper ignore files come later than
// those of their ancestors. .cnlabignore rules (same syntax) all come after every .gitignore rule,
// so a .cnlabignore has the last word: it exists to say what cnlab should upload differently from
// what git tracks. As in git, a path inside an ignored directory stays ignored whatever later
// rules say (git never looks inside an ignored directory, so nothing there can be re-included).
// Matching is case-sensitive, like git on Linux.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cnlab::agent {

enum class IgnoreSource { kGitignore, kCnlabignore };

class IgnoreRules {
 public:
  // Adds the rules in `text`, the contents of an ignore file in the directory `base_dir` (relative
  // to the root, '/'-separated, "" for the root itself). Files of one source must be added parents
  // first (a walk from the root does that); lines that hold no rule are skipped, never an error.
  void add(std::string_view base_dir, std::string_view text, IgnoreSource source = IgnoreSource::kGitignore);

  // Whether `path` (relative to the root, '/'-separated) is ignored by the rules that match it
  // itself, without looking at its parent directories. A walk that never enters an ignored
  // directory needs only this.
  bool matches(std::string_view path, bool is_dir) const;

  // Whether `path` is left out: it or one of its parent directories is ignored.
  bool ignored(std::string_view path, bool is_dir) const;

  bool empty() const { return git_.empty() && cnlab_.empty(); }

 private:
  struct Rule {
    std::string pattern;  // without '!', the trailing '/' and a leading '/'
    bool negated = false;
    bool dir_only = false;
    bool anchored = false;  // matched against the path below base, not the name alone
  };
  struct RuleFile {
    std::string base;  // "" or "dir/sub/" (with the trailing '/')
    std::vector<Rule> rules;
  };
  // -1 no rule matched, 0 a negated rule (included), 1 ignored.
  static int verdict(const std::vector<RuleFile>& files, std::string_view path, std::string_view name, bool is_dir);

  std::vector<RuleFile> git_;
  std::vector<RuleFile> cnlab_;
};

// Whether `text` matches the glob `pattern` as git's wildmatch does with WM_PATHNAME ('*', '?' and
// classes never match '/'; "**" between slashes or at either end spans directories). Exposed for tests.
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace cnlab::agent
