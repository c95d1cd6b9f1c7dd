// `cnlab run`, `cnlab logs` and `cnlab cancel` end to end: a real server, a real agent on simulated
// GPUs, and the real `cnlab` binary run as a researcher would, from a workspace directory with a
// config file in $HOME, its stdout, stderr and exit code captured.
#include <gmock/gmock.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>

#include "agent_process.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A `cnlab` child with its own HOME and working directory; stdout and stderr go to files.
class CliProcess {
 public:
  // Runs `cnlab ARGS`, or ARGS as given (ARGS[0] found on PATH) when `raw`.
  CliProcess(const std::vector<std::string>& args, const std::string& cwd, const std::string& home,
             const std::string& outputs, bool raw = false)
      : out_path_(outputs + ".out"), err_path_(outputs + ".err") {
    pid_ = ::fork();
    if (pid_ == 0) {
      int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      if (::chdir(cwd.c_str()) != 0) ::_exit(126);
      ::setenv("HOME", home.c_str(), 1);
      ::unsetenv("XDG_CONFIG_HOME");
      ::unsetenv("CNLAB_SERVER");
      ::unsetenv("CNLAB_TOKEN");
      ::unsetenv("CNLAB_CA");
      std::vector<std::string> argv_strings;
      if (!raw) argv_strings.push_back(CNLAB_BINARY);
      argv_strings.insert(argv_strings.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : argv_strings) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~CliProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // The exit code, -N for a signal N, or -1000 after `timeout` (the child is killed).
  int wait(std::chrono::milliseconds timeout = 60s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        pid_ = -1;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
        code_ = -1000;
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    return code_;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  std::string out() const { return read(out_path_); }
  std::string err() const { return read(err_path_); }

 private:
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  int code_ = -1;
};

struct Ran {
  int code;
  std::string out, err;
};

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

class CliRunTest : public ClusterTest {
 protected:
  void SetUp() override {
    ::chmod(nodes_.path().c_str(), 0711);
    start_server({"--not-ready-after", "2s", "--lost-after", "4s"});
    std::string join = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}})["token"];
    AgentProcess::Options options{"dev", "h100x2", ::geteuid() == 0 ? "nobody" : "", {}};
    agent_ = std::make_unique<AgentProcess>(*server_, join, nodes_.path() + "/agent-dev", options);
    ASSERT_TRUE(eventually([&] {
      auto r = admin_->request("GET", "/v1/nodes/dev");
      return r && r->status == 200 && Json::parse(r->body)["status"]["phase"] == "Ready";
    }));
    // ~/.config/cnlab/config, as `cnlab login` writes it.
    fs::create_directories(home_.path() + "/.config/cnlab");
    std::ofstream(home_.path() + "/.config/cnlab/config")
        << Json({{"server", server_->url()}, {"token", server_->admin_token()}, {"ca", server_->ca()}}).dump();
    // The workspace: jobs run as nobody when the test runs as root, so it must be readable.
    ::chmod(work_.path().c_str(), 0755);
    write("data.txt", "from the workspace\n");
  }

  void write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(work_.path() + "/" + path).parent_path());
    std::ofstream(work_.path() + "/" + path) << text;
  }

  std::unique_ptr<CliProcess> start(const std::vector<std::string>& args, bool raw = false) {
    return std::make_unique<CliProcess>(args, work_.path(), home_.path(), outputs_.path() + "/" + std::to_string(++runs_), raw);
  }
  // `cnlab ARGS` under a pseudo-terminal (util-linux `script`), stdout and stderr both on it.
  std::unique_ptr<CliProcess> start_on_terminal(const std::vector<std::string>& args) {
    std::string command = CNLAB_BINARY;
    for (const auto& a : args) command += " '" + a + "'";
    return start({"env", "TERM=xterm", "script", "-qefc", command, "/dev/null"}, /*raw=*/true);
  }
  Ran cnlab(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 60s) {
    auto process = start(args);
    int code = process->wait(timeout);
    return {code, process->out(), process->err()};
  }

  // The id from "cnlab: job ID submitted".
  static std::string submitted_id(const std::string& err) {
    std::smatch m;
    std::regex pattern("job ([a-z0-9.-]+) submitted");
    return std::regex_search(err, m, pattern) ? m[1].str() : "";
  }

  TempDir nodes_, home_, work_, outputs_;
  std::unique_ptr<AgentProcess> agent_;
  int runs_ = 0;
};

TEST_F(CliRunTest, AScriptsOutputIsStreamedItsArtifactDownloadedAndItExitsZero) {
  write("train.py",
        "import os, sys\n"
        "print('epoch 1', flush=True)\n"
        "print('a warning', file=sys.stderr, flush=True)\n"
        "print('args', sys.argv[1:])\n"
        "print('data', open('data.txt').read().strip())\n"
        "d = os.environ['CNLAB_ARTIFACTS_DIR']\n"
        "os.makedirs(d + '/results', exist_ok=True)\n"
        "open(d + '/results/metrics.csv', 'w').write('loss,acc\\n0.31,0.92\\n')\n");
  Ran ran = cnlab({"run", "--gpu", "h100-25", "train.py", "--epochs", "3"});
  ASSERT_EQ(ran.code, 0) << ran.out << ran.err;
  EXPECT_THAT(ran.out, HasSubstr("epoch 1\n"));
  EXPECT_THAT(ran.out, HasSubstr("args ['--epochs', '3']\n"));  // the job's flags went to the job
  EXPECT_THAT(ran.out, HasSubstr("data from the workspace\n"));
  EXPECT_THAT(ran.out, Not(HasSubstr("a warning")));
  EXPECT_THAT(ran.err, HasSubstr("a warning\n"));  // the job's stderr on cnlab's stderr
  std::string id = submitted_id(ran.err);
  ASSERT_FALSE(id.empty()) << ran.err;
  EXPECT_THAT(ran.err, HasSubstr("job " + id + " Succeeded in "));
  EXPECT_THAT(ran.err, HasSubstr("on node dev (h100 gpu"));
  EXPECT_THAT(ran.err, HasSubstr("25 blocks"));
  EXPECT_THAT(ran.err, HasSubstr("artifacts in ./cnlab-artifacts/" + id + "/ (1 file, 19 B)"));
  EXPECT_EQ(slurp(work_.path() + "/cnlab-artifacts/" + id + "/results/metrics.csv"), "loss,acc\n0.31,0.92");
  EXPECT_EQ(get_job(*admin_, id)["spec"]["command"], Json({"python3", "train.py", "--epochs", "3"}));
}

TEST_F(CliRunTest, TheJobsExitCodeIsTheCommandsExitCode) {
  Ran ran = cnlab({"run", "--gpu", "h100-25", "--", "sh", "-c", "echo failing; exit 3"});
  EXPECT_EQ(ran.code, 3) << ran.err;
  EXPECT_THAT(ran.out, HasSubstr("failing\n"));
  EXPECT_THAT(ran.err, HasSubstr("Failed (exit code 3) in "));
}

TEST_F(CliRunTest, AJobKilledByASignalExitsWith128PlusIt) {
  Ran ran = cnlab({"run", "--gpu", "h100-25", "--", "sh", "-c", "kill -KILL $$"});
  EXPECT_EQ(ran.code, 128 + 9) << ran.err;
  EXPECT_THAT(ran.err, HasSubstr("Failed (signal 9)"));
}

TEST_F(CliRunTest, AnUnchangedWorkspaceIsNotUploadedTwice) {
  Ran first = cnlab({"run", "--gpu", "h100-25", "--", "cat", "data.txt"});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_THAT(first.err, HasSubstr(", uploaded"));
  Ran second = cnlab({"run", "--gpu", "h100-25", "--", "cat", "data.txt"});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_THAT(second.err, HasSubstr("unchanged, not uploaded again"));
  EXPECT_EQ(second.out, "from the workspace\n");  // the job still got it
  size_t stored = 0;
  for (const auto& entry : fs::directory_iterator(server_->data_dir() + "/workspaces")) stored += entry.is_regular_file();
  EXPECT_EQ(stored, 1u);
}

TEST_F(CliRunTest, CnlabignoreLeavesFilesOutOfTheWorkspace) {
  write("secret.txt", "do not upload\n");
  write("cache/big.bin", "x");
  write(".cnlabignore", "secret.txt\ncache/\n");
  Ran ran = cnlab({"run", "--gpu", "h100-25", "--", "sh", "-c", "ls -A; test ! -e secret.txt"});
  ASSERT_EQ(ran.code, 0) << ran.out << ran.err;
  EXPECT_THAT(ran.out, HasSubstr("data.txt"));
  EXPECT_THAT(ran.out, Not(HasSubstr("secret.txt")));
  EXPECT_THAT(ran.out, Not(HasSubstr("cache")));
}

TEST_F(CliRunTest, AWorkspaceOverTheLimitIsRefusedWithTheNumbersAndTheBiggestFile) {
  write("weights.bin", std::string(2 << 20, 'w'));
  Ran ran = cnlab({"run", "--gpu", "h100-25", "--max-workspace", "1Mi", "--", "true"});
  EXPECT_EQ(ran.code, 125) << ran.err;
  EXPECT_THAT(ran.err, HasSubstr("weights.bin"));
  EXPECT_THAT(ran.err, HasSubstr("2.0 MiB"));
  EXPECT_THAT(ran.err, HasSubstr("1.0 MiB"));
  EXPECT_THAT(ran.err, HasSubstr(".cnlabignore"));
  EXPECT_TRUE(call(*admin_, "GET", "/v1/jobs", 200)["items"].empty());  // nothing was submitted
}

TEST_F(CliRunTest, DetachPrintsTheIdLastAndLogsFollowShowsEveryLineAndEnds) {
  Ran ran = cnlab({"run", "--detach", "--gpu", "h100-25", "--", "sh", "-c",
                   "for i in 1 2 3; do echo line $i; sleep 0.5; done; echo oops >&2"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  std::string out = ran.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  std::string id = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  EXPECT_EQ(get_job(*admin_, id)["metadata"]["name"], id);

  Ran followed = cnlab({"logs", "-f", id}, 30s);
  ASSERT_EQ(followed.code, 0) << followed.err;  // ended on its own once the job had
  EXPECT_EQ(followed.out, "line 1\nline 2\nline 3\n");
  EXPECT_EQ(followed.err, "oops\n");
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Succeeded");
}

TEST_F(CliRunTest, LogsAsJsonPrintsTheServersLinesFromASeq) {
  Ran ran = cnlab({"run", "--gpu", "h100-25", "--", "sh", "-c", "echo a; echo b; echo c"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  std::string id = submitted_id(ran.err);
  Ran logs = cnlab({"logs", "-o", "json", "--from-seq", "2", id});
  ASSERT_EQ(logs.code, 0) << logs.err;
  std::stringstream lines(logs.out);
  std::vector<Json> parsed;
  for (std::string line; std::getline(lines, line);) parsed.push_back(Json::parse(line));
  ASSERT_EQ(parsed.size(), 2u) << logs.out;
  EXPECT_EQ(parsed[0]["seq"], 2);
  EXPECT_EQ(parsed[0]["text"], "b");
  EXPECT_EQ(parsed[1]["text"], "c");
  EXPECT_EQ(cnlab({"logs", "no-such-job"}).code, 3);
}

TEST_F(CliRunTest, CtrlCCancelsTheJobAndExits130) {
  auto process = start({"run", "--gpu", "h100-25", "--", "sh", "-c", "while true; do echo tick; sleep 0.2; done"});
  ASSERT_TRUE(eventually([&] { return process->out().find("tick") != std::string::npos; }, 30s)) << process->err();
  process->signal(SIGINT);
  int code = process->wait(30s);
  EXPECT_EQ(code, 130) << process->err();
  std::string id = submitted_id(process->err());
  EXPECT_THAT(process->err(), HasSubstr("cancelling job " + id));
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Cancelled");
}

TEST_F(CliRunTest, ASecondCtrlCLeavesAtOnceWhileTheJobIsStillStopping) {
  // The job ignores SIGTERM, so it stops only after the agent's grace (1 s here).
  auto process = start({"run", "--gpu", "h100-25", "--", "sh", "-c", "trap '' TERM; while true; do echo tick; sleep 0.2; done"});
  ASSERT_TRUE(eventually([&] { return process->out().find("tick") != std::string::npos; }, 30s)) << process->err();
  process->signal(SIGINT);
  ASSERT_TRUE(eventually([&] { return process->err().find("cancelling job") != std::string::npos; }, 10s)) << process->err();
  process->signal(SIGINT);
  EXPECT_EQ(process->wait(5s), 130) << process->err();
  std::string id = submitted_id(process->err());
  EXPECT_THAT(process->err(), HasSubstr("interrupted again; leaving now"));
  Json left_at = get_job(*admin_, id);
  EXPECT_EQ(left_at["status"]["phase"], "Running") << "cnlab waited for the job's end: " << left_at.dump();
  EXPECT_TRUE(eventually([&] { return get_job(*admin_, id)["status"]["phase"] == "Cancelled"; }, 30s));
}

TEST_F(CliRunTest, OnATerminalAQueuedJobHasALiveStatusLineThatGivesWayToItsOutput) {
  Ran first = cnlab({"run", "--detach", "--gpu", "h100x2", "--", "sleep", "60"});
  ASSERT_EQ(first.code, 0) << first.err;
  std::string first_id = submitted_id(first.err);
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, first_id)["status"]["phase"] == "Running"; }, 30s));

  auto second = start_on_terminal({"run", "--gpu", "h100x2", "--", "sh", "-c", "echo my turn"});
  // The status line is redrawn in place: carriage return, erase line, a spinner, the state.
  std::regex redrawn(R"(\r\x1b\[K[|/\\-] queued \(position 1[^\r\n]*whole h100)");
  ASSERT_TRUE(eventually([&] {
    std::string out = second->out();
    return std::regex_search(out, redrawn) && count_of(out, "\r\x1b[K") >= 2;  // drawn, then redrawn
  }, 30s)) << second->out();
  EXPECT_EQ(cnlab({"cancel", first_id}).code, 0);
  EXPECT_EQ(second->wait(60s), 0) << second->out();
  std::string out = second->out();
  // The waiting line was erased before the job's first line, which stands on a line of its own.
  size_t line = out.find("my turn");
  ASSERT_NE(line, std::string::npos) << out;
  size_t last_waiting = out.rfind("queued", line);
  ASSERT_NE(last_waiting, std::string::npos) << out;
  EXPECT_NE(out.find("\r\x1b[K", last_waiting), std::string::npos) << out;
  EXPECT_LT(out.find("\r\x1b[K", last_waiting), line) << out;
  EXPECT_THAT(out.substr(line), Not(HasSubstr("queued")));
}

TEST_F(CliRunTest, PipedOutputHasNoStatusLineAndNoEscapes) {
  Ran ran = cnlab({"run", "--gpu", "h100-25", "--", "sh", "-c", "echo plain"});
  EXPECT_EQ(ran.code, 0) << ran.err;
  EXPECT_EQ(ran.out, "plain\n");
  EXPECT_THAT(ran.err, Not(HasSubstr("\x1b")));
  EXPECT_THAT(ran.err, Not(HasSubstr("\r")));
}

TEST_F(CliRunTest, AnUnknownGpuModelIsExplainedWithTheClustersModels) {
  Ran ran = cnlab({"run", "--gpu", "h900-25", "--", "true"});
  EXPECT_EQ(ran.code, 2) << ran.err;
  EXPECT_THAT(ran.err, HasSubstr("h900"));
  EXPECT_THAT(ran.err, HasSubstr("this cluster has h100 (2 GPUs on 1 node)"));
  EXPECT_THAT(ran.err, HasSubstr("MODELxN"));
  // A known model this cluster lacks: refused by admission (6), with the same help.
  Ran absent = cnlab({"run", "--gpu", "a100m80-25", "--", "true"});
  EXPECT_EQ(absent.code, 6) << absent.err;
  EXPECT_THAT(absent.err, HasSubstr("this cluster has h100"));
}

TEST_F(CliRunTest, AQueuedJobShowsItsPositionAndReasonAndRunsOnceTheGpusAreFree) {
  Ran first = cnlab({"run", "--detach", "--gpu", "h100x2", "--", "sleep", "60"});
  ASSERT_EQ(first.code, 0) << first.err;
  std::string first_id = submitted_id(first.err);
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, first_id)["status"]["phase"] == "Running"; }, 30s));

  auto second = start({"run", "--gpu", "h100x2", "--", "sh", "-c", "sleep 1; echo my turn"});
  ASSERT_TRUE(eventually([&] { return second->err().find("queued (position 1") != std::string::npos; }, 30s))
      << second->err();
  EXPECT_THAT(second->err(), HasSubstr("whole h100"));  // the scheduler's reason

  Ran cancelled = cnlab({"cancel", first_id});
  EXPECT_EQ(cancelled.code, 0) << cancelled.err;
  EXPECT_THAT(cancelled.out, HasSubstr("job " + first_id + " is stopping"));
  EXPECT_EQ(second->wait(60s), 0) << second->err();
  EXPECT_EQ(second->out(), "my turn\n");
  EXPECT_THAT(second->err(), HasSubstr("running on node dev"));
  Ran again = cnlab({"cancel", "-o", "json", first_id});
  EXPECT_EQ(again.code, 0);
  EXPECT_EQ(Json::parse(again.out)["status"]["phase"], "Cancelled");
}

}  // namespace
}  // namespace cnlab::server::test_support
