// Ids and node names are checked before any request: every command that puts one into a URL path
// refuses a value that is not a name (exit 2, naming the argument and the value), so "../nodes" or
// "a?b" never reaches the server as another path or a query; wait timeouts are whole seconds above 0.
#include <gmock/gmock.h>

#include <sstream>

#include "cli/arguments.h"
#include "cli/cli.h"

namespace cnlab::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string check(const CLI::Validator& validator, std::string value) { return validator(value); }

TEST(ArgumentChecks, AJobIdIsANameAsTheServerMakesThem) {
  for (const char* id :
       {"train-6f3ae726", "a", "job.v2-00000000", "x23456789012345678901234567890123456789012345678901234567890123"}) {
    EXPECT_THAT(check(job_id(), id), IsEmpty()) << id;
  }
  for (const char* id : {"../etc", "a/b", "a?b", "a%2Fb", "", "Train-6f3ae726", "-a", "a-", "a b",
                         "x234567890123456789012345678901234567890123456789012345678901234"}) {
    const std::string said = check(job_id(), id);
    EXPECT_THAT(said, HasSubstr("\"" + std::string(id) + "\" is not a job id")) << id;
    EXPECT_THAT(said, HasSubstr("a-z, 0-9, '-' and '.'")) << id;
  }
  EXPECT_THAT(check(node_name(), "../jobs"), HasSubstr("\"../jobs\" is not a node name"));
  EXPECT_THAT(check(node_name(), "gpu-7"), IsEmpty());
}

TEST(ArgumentChecks, ATimeoutIsWholeSecondsAboveZero) {
  for (const char* seconds : {"1", "600"}) EXPECT_THAT(check(positive_seconds(), seconds), IsEmpty()) << seconds;
  for (const char* seconds : {"0", "-3", "1.5", "ten", ""}) {
    EXPECT_THAT(check(positive_seconds(), seconds),
                HasSubstr("\"" + std::string(seconds) + "\": expected a whole number of seconds above 0"))
        << seconds;
  }
}

// What parsing `args` with the client commands as the binary registers them throws. The checks run
// while parsing, before any command's callback (which would reach for a server and exit), so every
// `args` here must fail one.
std::string parse_error(std::vector<std::string> args) {
  CLI::App app("cnlab");
  add_client_commands(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ValidationError& e) {
    return e.what();
  }
  return "parsed";
}

// Every command path of the tree with a positional named `name`, "admin node drain" style.
void commands_with(CLI::App& app, const std::string& prefix, const std::string& name, std::vector<std::string>& out) {
  for (CLI::App* sub : app.get_subcommands({})) {
    const std::string path = prefix.empty() ? sub->get_name() : prefix + " " + sub->get_name();
    for (const CLI::Option* option : sub->get_options()) {
      if (option->get_name(true, false) == name) out.push_back(path);
    }
    commands_with(*sub, path, name, out);
  }
}

std::vector<std::string> words(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(path);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(ArgumentChecks, EveryCommandTakingAJobRefusesAPathInItsPlace) {
  CLI::App tree("cnlab");
  add_client_commands(tree);
  std::vector<std::string> job_commands;
  commands_with(tree, "", "JOB", job_commands);
  EXPECT_THAT(job_commands, ::testing::IsSupersetOf({"logs", "cancel", "describe", "checkpoint", "migrate"}));
  for (const std::string& path : job_commands) {
    for (const char* hostile : {"../nodes", "train-1?x=1", "a/b/../c"}) {
      auto args = words(path);
      args.push_back(hostile);
      EXPECT_THAT(parse_error(args), HasSubstr("JOB: \"" + std::string(hostile) + "\" is not a job id")) << path;
    }
  }
}

TEST(ArgumentChecks, NodeNamesAndIdsInPathsAreCheckedToo) {
  EXPECT_THAT(parse_error({"migrate", "train-1", "--to", "../jobs"}),
              HasSubstr("--to: \"../jobs\" is not a node name"));
  EXPECT_THAT(parse_error({"nodes", "--node", "a?b"}), HasSubstr("--node: \"a?b\" is not a node name"));
  EXPECT_THAT(parse_error({"gpus", "--node", "a/b"}), HasSubstr("--node: \"a/b\" is not a node name"));
  for (const char* verb : {"cordon", "drain", "uncordon"}) {
    EXPECT_THAT(parse_error({"admin", "node", verb, "../x"}), HasSubstr("NAME: \"../x\" is not a node name")) << verb;
  }
  EXPECT_THAT(parse_error({"admin", "token", "revoke", "../x"}), HasSubstr("ID: \"../x\" is not a token id"));
  EXPECT_THAT(parse_error({"admin", "join-token", "revoke", "a?b"}), HasSubstr("ID: \"a?b\" is not a join token id"));
  EXPECT_THAT(parse_error({"admin", "quota", "set", "../x", "--spec", "{}"}),
              HasSubstr("NAME: \"../x\" is not a quota name"));
}

TEST(ArgumentChecks, WaitTimeoutsAreWholeSecondsAboveZero) {
  EXPECT_THAT(parse_error({"checkpoint", "train-1", "--timeout", "-3"}),
              HasSubstr("--timeout: \"-3\": expected a whole number of seconds above 0"));
  EXPECT_THAT(parse_error({"migrate", "train-1", "--timeout", "0"}),
              HasSubstr("--timeout: \"0\": expected a whole number of seconds above 0"));
  EXPECT_THAT(parse_error({"admin", "node", "drain", "gpu-1", "--wait", "--timeout", "-1"}),
              HasSubstr("--timeout: \"-1\": expected a whole number of seconds above 0"));
}

}  // namespace
}  // namespace cnlab::cli
