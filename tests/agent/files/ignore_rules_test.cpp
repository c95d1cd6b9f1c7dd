#include "agent/files/ignore_rules.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace cnlab::agent {
namespace {

struct IgnoreFile {
  std::string base;
  std::string text;
  IgnoreSource source = IgnoreSource::kGitignore;
};

struct Case {
  std::string name;  // what the case shows
  std::vector<IgnoreFile> files;
  std::string path;
  bool is_dir;
  bool ignored;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name << " [" << c.path << "]"; }

class GitignoreSemantics : public ::testing::TestWithParam<Case> {};

TEST_P(GitignoreSemantics, DecidesLikeGit) {
  const Case& c = GetParam();
  IgnoreRules rules;
  for (const auto& f : c.files) rules.add(f.base, f.text, f.source);
  EXPECT_EQ(rules.ignored(c.path, c.is_dir), c.ignored) << c.name;
}

constexpr bool kDir = true;
constexpr bool kFile = false;
constexpr auto kCnlab = IgnoreSource::kCnlabignore;

INSTANTIATE_TEST_SUITE_P(
    Table, GitignoreSemantics,
    ::testing::Values(
        // Names without a slash match at any depth.
        Case{"name glob at root", {{"", "*.log"}}, "a.log", kFile, true},
        Case{"name glob deep", {{"", "*.log"}}, "x/y/b.log", kFile, true},
        Case{"name glob other extension", {{"", "*.log"}}, "a.txt", kFile, false},
        Case{"plain name matches a directory too", {{"", "cache"}}, "src/cache", kDir, true},
        Case{"case-sensitive", {{"", "*.LOG"}}, "a.log", kFile, false},
        // Comments, blanks, escapes, spaces, CRLF.
        Case{"comment is no rule", {{"", "#notes\n"}}, "#notes", kFile, false},
        Case{"escaped hash is a rule", {{"", "\\#notes\n"}}, "#notes", kFile, true},
        Case{"blank lines are skipped", {{"", "\n\n   \n*.o\n\n"}}, "a.o", kFile, true},
        Case{"escaped bang is literal", {{"", "\\!important"}}, "!important", kFile, true},
        Case{"trailing spaces dropped", {{"", "foo   "}}, "foo", kFile, true},
        Case{"escaped trailing space kept", {{"", "foo\\ "}}, "foo ", kFile, true},
        Case{"escaped trailing space not dropped", {{"", "foo\\ "}}, "foo", kFile, false},
        Case{"CRLF line endings", {{"", "*.tmp\r\nbuild/\r\n"}}, "a.tmp", kFile, true},
        Case{"CRLF dir-only rule", {{"", "*.tmp\r\nbuild/\r\n"}}, "build", kDir, true},
        // Negation and order.
        Case{"negation re-includes", {{"", "*.log\n!keep.log"}}, "keep.log", kFile, false},
        Case{"negation leaves others", {{"", "*.log\n!keep.log"}}, "drop.log", kFile, true},
        Case{"later rule wins", {{"", "!keep.log\n*.log"}}, "keep.log", kFile, true},
        // Dir-only.
        Case{"dir-only matches dir", {{"", "build/"}}, "build", kDir, true},
        Case{"dir-only skips file", {{"", "build/"}}, "build", kFile, false},
        Case{"dir-only covers contents", {{"", "build/"}}, "build/out/x.o", kFile, true},
        Case{"dir-only at depth", {{"", "build/"}}, "src/build", kDir, true},
        // Anchoring.
        Case{"leading slash anchors", {{"", "/todo"}}, "todo", kFile, true},
        Case{"leading slash not deeper", {{"", "/todo"}}, "src/todo", kFile, false},
        Case{"middle slash anchors", {{"", "doc/frotz"}}, "doc/frotz", kFile, true},
        Case{"middle slash not deeper", {{"", "doc/frotz"}}, "a/doc/frotz", kFile, false},
        Case{"star stays in a segment", {{"", "doc/*.txt"}}, "doc/a.txt", kFile, true},
        Case{"star does not cross slash", {{"", "doc/*.txt"}}, "doc/sub/a.txt", kFile, false},
        // '?' and classes.
        Case{"question mark one char", {{"", "?.txt"}}, "a.txt", kFile, true},
        Case{"question mark not two", {{"", "?.txt"}}, "ab.txt", kFile, false},
        Case{"question mark not slash", {{"", "a?b"}}, "a/b", kFile, false},
        Case{"range", {{"", "file[0-9].txt"}}, "file7.txt", kFile, true},
        Case{"range miss", {{"", "file[0-9].txt"}}, "filex.txt", kFile, false},
        Case{"negated class bang", {{"", "[!a]x"}}, "bx", kFile, true},
        Case{"negated class bang miss", {{"", "[!a]x"}}, "ax", kFile, false},
        Case{"negated class caret", {{"", "[^a]x"}}, "ax", kFile, false},
        Case{"named class", {{"", "v[[:digit:]]"}}, "v3", kFile, true},
        Case{"named class miss", {{"", "v[[:digit:]]"}}, "vx", kFile, false},
        Case{"bracket first is literal", {{"", "[]a]z"}}, "]z", kFile, true},
        Case{"unclosed class matches nothing", {{"", "[ab"}}, "[ab", kFile, false},
        Case{"escaped star literal", {{"", "a\\*b"}}, "a*b", kFile, true},
        Case{"escaped star not a glob", {{"", "a\\*b"}}, "axb", kFile, false},
        // '**'.
        Case{"leading ** any depth", {{"", "**/foo"}}, "a/b/foo", kFile, true},
        Case{"leading ** zero depth", {{"", "**/foo"}}, "foo", kFile, true},
        Case{"leading ** with path", {{"", "**/foo/bar"}}, "x/foo/bar", kFile, true},
        Case{"leading ** with path at root", {{"", "**/foo/bar"}}, "foo/bar", kFile, true},
        Case{"trailing ** contents", {{"", "abc/**"}}, "abc/x/y", kFile, true},
        Case{"trailing ** not the directory itself", {{"", "abc/**"}}, "abc", kDir, false},
        Case{"middle ** zero dirs", {{"", "a/**/b"}}, "a/b", kFile, true},
        Case{"middle ** many dirs", {{"", "a/**/b"}}, "a/x/y/b", kFile, true},
        Case{"middle ** not a partial name", {{"", "a/**/b"}}, "a/xb", kFile, false},
        Case{"lone ** everything", {{"", "**"}}, "deep/er/file", kFile, true},
        Case{"other ** is a star", {{"", "foo**bar"}}, "fooxyzbar", kFile, true},
        Case{"other ** does not cross slash", {{"", "foo**bar"}}, "foo/bar", kFile, false},
        // A file in an ignored directory cannot be re-included.
        Case{"no re-include below ignored dir", {{"", "build/\n!build/keep.txt"}}, "build/keep.txt", kFile, true},
        Case{"no re-include by name", {{"", "logs\n!*.txt"}}, "logs/a.txt", kFile, true},
        // git's documented "/*, !/foo, /foo/*, !/foo/bar" example.
        Case{"doc example keeps foo/bar", {{"", "/*\n!/foo\n/foo/*\n!/foo/bar"}}, "foo/bar", kFile, false},
        Case{"doc example drops foo/baz", {{"", "/*\n!/foo\n/foo/*\n!/foo/bar"}}, "foo/baz", kFile, true},
        Case{"doc example drops others", {{"", "/*\n!/foo\n/foo/*\n!/foo/bar"}}, "other", kFile, true},
        // Nested ignore files.
        Case{"nested negation overrides parent", {{"", "*.log"}, {"sub", "!important.log"}}, "sub/important.log", kFile, false},
        Case{"nested negation only below it", {{"", "*.log"}, {"sub", "!important.log"}}, "important.log", kFile, true},
        Case{"nested negation not in siblings", {{"", "*.log"}, {"sub", "!important.log"}}, "other/important.log", kFile, true},
        Case{"nested anchor is its own dir", {{"sub", "/gen"}}, "sub/gen", kFile, true},
        Case{"nested anchor not the root", {{"sub", "/gen"}}, "gen", kFile, false},
        Case{"nested anchor not deeper", {{"sub", "/gen"}}, "sub/x/gen", kFile, false},
        Case{"nested middle slash relative to it", {{"a/b", "c/d"}}, "a/b/c/d", kFile, true},
        Case{"nested rules do not apply to the dir itself", {{"sub", "sub"}}, "sub", kDir, false},
        // .cnlabignore comes after every .gitignore rule.
        Case{"cnlabignore adds", {{"", "*.log"}, {"", "data/", kCnlab}}, "data", kDir, true},
        Case{"cnlabignore re-includes", {{"", "*.log"}, {"", "!run.log", kCnlab}}, "run.log", kFile, false},
        Case{"cnlabignore beats deeper gitignore", {{"", "!keep.bin", kCnlab}, {"sub", "keep.bin"}}, "sub/keep.bin", kFile, false},
        Case{"gitignore negation cannot undo cnlabignore", {{"", "*.ckpt", kCnlab}, {"", "!a.ckpt"}}, "a.ckpt", kFile, true},
        Case{"cnlabignore cannot re-include below ignored dir", {{"", "out/"}, {"", "!out/keep", kCnlab}}, "out/keep", kFile, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name;
      for (char c : info.param.name) name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
      return name;
    });

TEST(IgnoreRules, MatchesLooksOnlyAtThePathItself) {
  IgnoreRules rules;
  rules.add("", "build/");
  EXPECT_TRUE(rules.matches("build", /*is_dir=*/true));
  EXPECT_FALSE(rules.matches("build/x.o", /*is_dir=*/false));  // a walk never gets there
  EXPECT_TRUE(rules.ignored("build/x.o", /*is_dir=*/false));
}

TEST(IgnoreRules, FileWithOnlyCommentsAddsNothing) {
  IgnoreRules rules;
  rules.add("", "# nothing\n\n!\n/\n");
  EXPECT_TRUE(rules.empty());
}

TEST(GlobMatch, HostilePatternFinishesQuickly) {
  std::string text(4000, 'a');
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*b", text));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(GlobMatch, TrailingBackslashMatchesNothing) {
  EXPECT_FALSE(glob_match("abc\\", "abc\\"));
  EXPECT_FALSE(glob_match("abc\\", "abc"));
}

}  // namespace
}  // namespace cnlab::agent
