// `cnlab completion bash`: the script lists every command of the tree it is generated from, and
// bash itself completes with it.
#include <gmock/gmock.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "cli/cli.h"
#include "cli/commands.h"

namespace cnlab::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Every command path of the tree, "admin project create" style.
void paths(CLI::App& app, const std::string& prefix, std::vector<std::string>& out) {
  for (CLI::App* sub : app.get_subcommands({})) {
    std::string path = prefix.empty() ? sub->get_name() : prefix + " " + sub->get_name();
    out.push_back(path);
    paths(*sub, path, out);
  }
}

// The client commands as the binary registers them, plus a role registered elsewhere.
std::unique_ptr<CLI::App> client_tree() {
  auto app = std::make_unique<CLI::App>("cnlab");
  auto* server = app->add_subcommand("server", "Run the server");
  server->add_option("--data-dir", "Data directory");
  server->add_subcommand("init", "Initialise");
  add_client_commands(*app);
  return app;
}

TEST(Completion, TheScriptNamesEveryCommandUnderItsParent) {
  auto app = client_tree();
  std::string script = bash_completion_script(*app, "cnlab");
  std::vector<std::string> all;
  paths(*app, "", all);
  ASSERT_GT(all.size(), 20u);
  for (const std::string& path : all) {
    std::string parent = path.find(' ') == std::string::npos ? "" : path.substr(0, path.rfind(' '));
    std::string name = path.substr(path.rfind(' ') == std::string::npos ? 0 : path.rfind(' ') + 1);
    // The parent's case line lists the name.
    auto line_at = script.find("    \"" + parent + "\") echo \"");
    ASSERT_NE(line_at, std::string::npos) << "no case for \"" << parent << "\"";
    std::string line = script.substr(line_at, script.find('\n', line_at) - line_at);
    EXPECT_THAT(" " + line.substr(line.find("echo \"") + 6), HasSubstr(" " + name)) << path;
  }
  for (const char* command : {"ps", "describe", "nodes", "gpus", "quota", "login", "completion", "admin", "audit"}) {
    EXPECT_NE(std::find(all.begin(), all.end(), command), all.end()) << command;
  }
}

TEST(Completion, OptionsThatTakeValuesAndJobArgumentsAreKnown) {
  auto app = client_tree();
  std::string script = bash_completion_script(*app, "cnlab");
  EXPECT_THAT(script, HasSubstr("\"ps|--project\") return 0"));
  EXPECT_THAT(script, HasSubstr("\"ps|-o\") return 0"));
  EXPECT_THAT(script, Not(HasSubstr("\"ps|--all\") return 0")));
  EXPECT_THAT(script, HasSubstr("\"server|--data-dir\") return 0"));
  EXPECT_THAT(script, HasSubstr("    \"describe\") return 0"));
  EXPECT_THAT(script, HasSubstr("complete -F _cnlab cnlab"));
}

// Runs the script in bash with COMP_WORDS set to `words` (the last one being completed).
std::string complete(const std::string& script, const std::string& words) {
  char path[] = "/tmp/cnlab_completion_XXXXXX";
  int fd = ::mkstemp(path);
  ::close(fd);
  std::ofstream(path) << script;
  std::string command = "bash -c 'source " + std::string(path) + "; COMP_WORDS=(" + words +
                        "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _cnlab; echo \"${COMPREPLY[*]}\"' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  ::pclose(pipe);
  std::remove(path);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST(Completion, BashCompletesCommandsSubcommandsOptionsAndValues) {
  auto app = client_tree();
  std::string script = bash_completion_script(*app, "cnlab");
  EXPECT_EQ(complete(script, "cnlab qu"), "quota");
  EXPECT_EQ(complete(script, "cnlab admin proj"), "project");
  EXPECT_EQ(complete(script, "cnlab admin project cr"), "create");
  EXPECT_EQ(complete(script, "cnlab admin --server project project cr"), "create");
  EXPECT_EQ(complete(script, "cnlab ps --pha"), "--phase");
  EXPECT_EQ(complete(script, "cnlab ps -o j"), "json");
  EXPECT_EQ(complete(script, "cnlab ps --phase Ru"), "Running");
  // After an option's value, commands again (the value "admin" is not taken for the command).
  EXPECT_EQ(complete(script, "cnlab ps --project admin --al"), "--all");
}

}  // namespace
}  // namespace cnlab::cli
