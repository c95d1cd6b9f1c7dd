// The look-around commands end to end: a real server and agent (simulated GPUs), and the real
// `cnlab` binary run as a user would, with its own HOME: login, ps, describe, nodes, gpus, quota,
// colour on a terminal only, and the exit codes scripts rely on.
#include <gmock/gmock.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <fstream>
#include <map>

#include "agent_process.h"
#include "auth/auth.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Ran {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `argv` (argv[0] a path) with HOME=`home`, NO_COLOR unset, plus `env`; stdout and stderr
// apart, stdin from /dev/null.
Ran run_in(const std::string& home, std::vector<std::string> argv, const std::map<std::string, std::string>& env = {}) {
  std::string err_path = home + "/.stderr";
  int out[2];
  if (::pipe(out) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("HOME", home.c_str(), 1);
    ::unsetenv("NO_COLOR");
    ::unsetenv("XDG_CONFIG_HOME");
    ::unsetenv("CNLAB_SERVER");
    ::unsetenv("CNLAB_TOKEN");
    ::unsetenv("CNLAB_CA");
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(out[1], 1);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(err, 2);
    ::close(out[0]);
    ::close(out[1]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  Ran ran;
  char buffer[65536];
  ssize_t n;
  while ((n = ::read(out[0], buffer, sizeof buffer)) > 0) ran.out.append(buffer, n);
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ran.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  ran.err = slurp(err_path);
  return ran;
}

// `cnlab ARGS...` as the user whose HOME is `home`.
Ran cnlab(const std::string& home, std::vector<std::string> args, const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), CNLAB_BINARY);
  return run_in(home, std::move(args), env);
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') == std::string::npos ? 0 : t.rfind('\n') + 1);
}

// A port nothing listens on (bound, then closed).
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t size = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  ::close(fd);
  return ntohs(address.sin_port);
}

class CliLookTest : public ClusterTest {
 protected:
  void SetUp() override {
    ::chmod(nodes_.path().c_str(), 0711);
    start_server({});
    for (const char* user : {"admin", "alice", "bob", "carol"}) {
      homes_[user] = homes_dir_.path() + "/" + user;
      fs::create_directories(homes_[user]);
    }
  }

  // An agent stopped with SIGTERM leaves its jobs running: cancel them first, so that no test
  // leaves processes behind.
  void TearDown() override {
    if (agents_.empty()) return;
    auto active = [&] {
      std::vector<std::string> ids;
      Json jobs = call(*admin_, "GET", "/v1/jobs", 200);
      for (const Json& job : jobs["items"]) {
        if (job["status"]["phase"] == "Running" || job["status"]["phase"] == "Scheduled") ids.push_back(job["metadata"]["name"]);
      }
      return ids;
    };
    for (const std::string& id : active()) {
      auto cancelled = admin_->request("POST", "/v1/jobs/" + id + "/cancel");
      EXPECT_TRUE(cancelled);
    }
    EXPECT_TRUE(eventually([&] { return active().empty(); }, 15s));
  }

  const std::string& home(const std::string& user) { return homes_.at(user); }

  // A node registered through the API (no agent): jobs can be admitted, none runs.
  void register_fake_node() { register_node("fake-1", "h100", 2); }

  // Logs `user` in with `token`; expects success.
  void login(const std::string& user, const std::string& token) {
    Ran ran = cnlab(home(user), {"login", "--server", server_->url(), "--token", token, "--ca", server_->ca()});
    ASSERT_EQ(ran.code, 0) << ran.out << ran.err;
  }

  void add_agent(const std::string& name, const std::string& gpus = "h100x2", std::vector<std::string> flags = {}) {
    std::string join = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}})["token"];
    AgentProcess::Options options{name, gpus, ::geteuid() == 0 ? "nobody" : "", std::move(flags)};
    agents_.push_back(std::make_unique<AgentProcess>(*server_, join, nodes_.path() + "/agent-" + name, options));
    ASSERT_TRUE(eventually([&] {
      auto r = admin_->request("GET", "/v1/nodes/" + name);
      return r && r->status == 200 && Json::parse(r->body)["status"]["phase"] == "Ready";
    }));
  }

  // Two teams: alice (member of vision) and bob (member of nlp), set up with `cnlab admin` by the
  // admin, each logged in with their own HOME.
  void two_teams() {
    login("admin", server_->admin_token());
    for (const char* project : {"vision", "nlp"}) {
      Ran made = cnlab(home("admin"), {"admin", "project", "create", project});
      ASSERT_EQ(made.code, 0) << made.err;
    }
    for (auto [user, project] : {std::pair{"alice", "vision"}, std::pair{"bob", "nlp"}}) {
      Ran token = cnlab(home("admin"), {"admin", "token", "create", "--user", user, "--project", project, "--role", "member"});
      ASSERT_EQ(token.code, 0) << token.err;
      tokens_[user] = last_line(token.out);
      login(user, tokens_[user]);
    }
  }

  std::string submit(const std::string& user, const std::string& project, const std::string& gpu,
                     const std::string& name = "train") {
    auto client = server_->client(tokens_.at(user));
    Json body = job_body(project, gpu, {"sleep", "120"});
    body["metadata"]["name"] = name;
    body["spec"]["memory_mib"] = 64;
    body["spec"]["cpu_milli"] = 0;
    return call(*client, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  }

  void wait_running(const std::string& id) {
    ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"]["phase"] == "Running"; }, 20s)) << id;
  }

  TempDir homes_dir_;
  TempDir nodes_;
  std::map<std::string, std::string> homes_;
  std::map<std::string, std::string> tokens_;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
};

TEST_F(CliLookTest, LoginWritesAPrivateConfigAndThenPsNeedsNoFlags) {
  register_fake_node();
  Ran ran = cnlab(home("admin"), {"login", "--server", server_->url(), "--token", server_->admin_token(), "--ca", server_->ca()});
  ASSERT_EQ(ran.code, 0) << ran.err;
  EXPECT_THAT(ran.out, HasSubstr("as admin"));
  std::string config = home("admin") + "/.config/cnlab/config";
  struct stat st{};
  ASSERT_EQ(::stat(config.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Json saved = Json::parse(slurp(config));
  EXPECT_EQ(saved["server"], server_->url());
  EXPECT_EQ(saved["token"], server_->admin_token());

  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "none", {"true"}))["metadata"]["name"];
  Ran ps = cnlab(home("admin"), {"ps"});
  ASSERT_EQ(ps.code, 0) << ps.err;
  EXPECT_THAT(ps.out, AllOf(HasSubstr("JOB"), HasSubstr("PHASE"), HasSubstr(id)));
}

TEST_F(CliLookTest, LoginWithABadTokenFailsWithExit4AndWritesNothing) {
  Ran ran = cnlab(home("alice"), {"login", "--server", server_->url(), "--token", "not-a-token", "--ca", server_->ca()});
  EXPECT_EQ(ran.code, 4);
  EXPECT_THAT(ran.err, HasSubstr("nothing was written"));
  EXPECT_FALSE(fs::exists(home("alice") + "/.config/cnlab/config"));
}

TEST_F(CliLookTest, UsersSeeOnlyTheirOwnProjectsJobsAndTheAdminSeesAllWithAll) {
  register_fake_node();
  two_teams();
  std::string alices = submit("alice", "vision", "none", "alice-job");
  std::string bobs = submit("bob", "nlp", "none", "bob-job");

  Ran alice_ps = cnlab(home("alice"), {"ps"});
  ASSERT_EQ(alice_ps.code, 0) << alice_ps.err;
  EXPECT_THAT(alice_ps.out, HasSubstr(alices));
  EXPECT_THAT(alice_ps.out, Not(HasSubstr(bobs)));
  Ran alice_all = cnlab(home("alice"), {"ps", "--all"});
  EXPECT_THAT(alice_all.out, Not(HasSubstr(bobs)));

  Ran bob_describes = cnlab(home("bob"), {"describe", alices});
  EXPECT_EQ(bob_describes.code, 3);
  EXPECT_THAT(bob_describes.err, HasSubstr("no such job"));
  Ran alice_describes = cnlab(home("alice"), {"describe", alices});
  EXPECT_EQ(alice_describes.code, 0) << alice_describes.err;
  EXPECT_THAT(alice_describes.out, AllOf(HasSubstr("Project:     vision"), HasSubstr("Queued")));

  // The admin's own jobs by default (none here), everyone's with --all, with the USER column.
  Ran admin_ps = cnlab(home("admin"), {"ps"});
  EXPECT_THAT(admin_ps.out, AllOf(Not(HasSubstr(alices)), Not(HasSubstr(bobs))));
  Ran admin_all = cnlab(home("admin"), {"ps", "--all"});
  ASSERT_EQ(admin_all.code, 0) << admin_all.err;
  EXPECT_THAT(admin_all.out, AllOf(HasSubstr(alices), HasSubstr(bobs), HasSubstr("USER"), HasSubstr("alice"), HasSubstr("bob")));
  Ran admin_nlp = cnlab(home("admin"), {"ps", "--all", "--project", "nlp"});
  EXPECT_THAT(admin_nlp.out, AllOf(HasSubstr(bobs), Not(HasSubstr(alices))));

  // A project alice cannot see is "no such project", exit 3.
  Ran alice_nlp = cnlab(home("alice"), {"ps", "--project", "nlp"});
  EXPECT_EQ(alice_nlp.code, 3);
  EXPECT_THAT(alice_nlp.err, HasSubstr("--project \"nlp\""));
}

TEST_F(CliLookTest, JsonAndNameOutputsAreForScripts) {
  register_fake_node();
  two_teams();
  std::string a = submit("alice", "vision", "none", "one");
  std::string b = submit("alice", "vision", "none", "two");
  Ran json = cnlab(home("alice"), {"ps", "-o", "json"});
  ASSERT_EQ(json.code, 0) << json.err;
  Json parsed = Json::parse(json.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json.out;
  ASSERT_EQ(parsed["items"].size(), 2u);
  std::set<std::string> ids;
  for (const Json& job : parsed["items"]) ids.insert(job["metadata"]["name"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{a, b}));
  EXPECT_EQ(parsed["items"][0]["spec"]["user"], "alice");

  Ran names = cnlab(home("alice"), {"ps", "-o", "name"});
  EXPECT_EQ(names.out, a < b ? a + "\n" + b + "\n" : b + "\n" + a + "\n");

  Ran bad = cnlab(home("alice"), {"ps", "-o", "yaml"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("-o \"yaml\""));
  Ran bad_phase = cnlab(home("alice"), {"ps", "--phase", "Sleeping"});
  EXPECT_EQ(bad_phase.code, 2);
  EXPECT_THAT(bad_phase.err, HasSubstr("--phase"));

  Ran described = cnlab(home("alice"), {"describe", a, "-o", "json"});
  ASSERT_EQ(described.code, 0);
  EXPECT_EQ(Json::parse(described.out)["metadata"]["name"], a);
}

TEST_F(CliLookTest, NodesNamesANodeIdleForPowerDownAfterAsAPowerDownCandidate) {
  server_->stop(SIGTERM);
  const std::string config = homes_dir_.path() + "/scheduler.json";
  std::ofstream(config) << R"({"power_down_after": "1s"})";
  start_server({"--scheduler-config", config});
  login("admin", server_->admin_token());
  add_agent("gpu-1");
  Ran nodes;
  ASSERT_TRUE(eventually([&] {
    nodes = cnlab(home("admin"), {"nodes"});
    return nodes.out.find("power-down candidate (idle ") != std::string::npos;
  })) << nodes.out << nodes.err;
  EXPECT_EQ(nodes.code, 0);
}

TEST_F(CliLookTest, DescribeSaysWhereAJobRunsWithItsGpusOrNone) {
  add_agent("gpu-1");
  two_teams();
  std::string train = submit("alice", "vision", "h100-50", "train");
  std::string prep = submit("alice", "vision", "none", "prep");
  wait_running(train);
  wait_running(prep);

  Ran with_gpu = cnlab(home("alice"), {"describe", train});
  ASSERT_EQ(with_gpu.code, 0) << with_gpu.err;
  EXPECT_THAT(with_gpu.out, ContainsRegex("Placement: +gpu-1: gpu[01]=50 blocks, [0-9.]+ GiB VRAM"));
  EXPECT_THAT(with_gpu.out, ContainsRegex("bound to gpu-1: gpu[01]=50"));
  Ran without = cnlab(home("alice"), {"describe", prep});
  ASSERT_EQ(without.code, 0) << without.err;
  EXPECT_THAT(without.out, AllOf(HasSubstr("Placement:   gpu-1 (no GPUs)\n"), HasSubstr("bound to gpu-1 (no GPUs)\n")));
}

// Nodes a move cannot go to say so: one whose agent takes no live migrations, and one whose GPU
// jobs do not move (they save their own state).
TEST_F(CliLookTest, NodesSayWhichMovesTheyCannotTake) {
  add_agent("gpu-1");
  add_agent("gpu-2", "h100x1", {"--criu", "none"});
  add_agent("gpu-3", "h100x1", {"--cuda-checkpoint", "none"});
  login("admin", server_->admin_token());
  Ran nodes = cnlab(home("admin"), {"nodes"});
  ASSERT_EQ(nodes.code, 0) << nodes.err;
  EXPECT_THAT(nodes.out, ContainsRegex("gpu-2 [^\n]* takes no live migrations\n")) << nodes.out;
  // Where CRIU works (root, as in CI) gpu-1 and gpu-3 take moves of CPU jobs; elsewhere none at all.
  const bool migrates = agents_.back()->log().find("live migrations on") != std::string::npos;
  if (::geteuid() == 0) {
    EXPECT_TRUE(migrates) << "as root this machine's agents take live migrations";
  }
  EXPECT_THAT(nodes.out, ContainsRegex(migrates ? "gpu-3 [^\n]* GPU jobs do not migrate\n"
                                                : "gpu-3 [^\n]* takes no live migrations\n"))
      << nodes.out;
  if (migrates) {
    EXPECT_THAT(nodes.out, Not(ContainsRegex("gpu-1 [^\n]*migrat"))) << "gpu-1 takes every move: " << nodes.out;
  }
}

TEST_F(CliLookTest, NodesAndGpusShowTheSimulatedNodeAndWhoHoldsWhichBlocks) {
  add_agent("gpu-1");
  two_teams();
  std::string train = submit("alice", "vision", "h100-50", "train");
  std::string eval = submit("alice", "vision", "h100-25", "eval");
  wait_running(train);
  wait_running(eval);

  Ran nodes = cnlab(home("alice"), {"nodes"});
  ASSERT_EQ(nodes.code, 0) << nodes.err;
  EXPECT_THAT(nodes.out, AllOf(HasSubstr("gpu-1"), HasSubstr("Ready"), HasSubstr("simulated"), HasSubstr("h100x2 125/200")));

  Ran gpus = cnlab(home("alice"), {"gpus"});
  ASSERT_EQ(gpus.code, 0) << gpus.err;
  // The two jobs share GPU 0 (the scheduler packs them), or each has a GPU of its own.
  bool shared = gpus.out.find("[AAAAAAAAAAbbbbb.....]") != std::string::npos ||
                gpus.out.find("[AAAAAbbbbbbbbbb.....]") != std::string::npos;
  bool apart = gpus.out.find("[AAAAAAAAAA..........]") != std::string::npos ||
               gpus.out.find("[AAAAA...............]") != std::string::npos;
  EXPECT_TRUE(shared || apart) << gpus.out;
  EXPECT_THAT(gpus.out, AllOf(HasSubstr("simulated"), HasSubstr(train), HasSubstr(eval), HasSubstr("gpu-1:")));
  EXPECT_THAT(gpus.out, AllOf(HasSubstr("\nA  "), HasSubstr("\nb  ")));  // the legend
  EXPECT_THAT(gpus.out, Not(HasSubstr("\033[")));

  Ran json = cnlab(home("alice"), {"gpus", "-o", "json"});
  ASSERT_EQ(json.code, 0);
  Json items = Json::parse(json.out)["items"];
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0]["free_blocks"].get<int>() + items[1]["free_blocks"].get<int>(), 125);

  Ran one_node = cnlab(home("alice"), {"gpus", "--node", "gpu-9"});
  EXPECT_EQ(one_node.code, 3);

  // bob has no role in vision: alice's blocks are taken, not free, and her jobs stay unnamed.
  Ran bob_nodes = cnlab(home("bob"), {"nodes"});
  ASSERT_EQ(bob_nodes.code, 0) << bob_nodes.err;
  EXPECT_THAT(bob_nodes.out, HasSubstr("h100x2 125/200"));
  Ran bob_gpus = cnlab(home("bob"), {"gpus"});
  ASSERT_EQ(bob_gpus.code, 0) << bob_gpus.err;
  EXPECT_THAT(bob_gpus.out, AllOf(HasSubstr("#####"), HasSubstr("(other projects)"), Not(HasSubstr(train)),
                                  Not(HasSubstr(eval)), Not(HasSubstr("alice"))));
  EXPECT_THAT(bob_gpus.err, HasSubstr("show as '#'"));
  Json bob_items = Json::parse(cnlab(home("bob"), {"gpus", "-o", "json"}).out)["items"];
  ASSERT_EQ(bob_items.size(), 2u);
  EXPECT_EQ(bob_items[0]["free_blocks"].get<int>() + bob_items[1]["free_blocks"].get<int>(), 125);
  EXPECT_EQ(bob_items[0]["other_projects_blocks"].get<int>() + bob_items[1]["other_projects_blocks"].get<int>(), 75);
  EXPECT_TRUE(bob_items[0]["holders"].empty() && bob_items[1]["holders"].empty());
}

TEST_F(CliLookTest, AnOverQuotaSubmitIsRefusedWithTheNumbersAndQuotaShowsUsedAgainstLimit) {
  register_fake_node();
  two_teams();
  Ran set = cnlab(home("admin"), {"admin", "quota", "set", "vision-jobs", "--spec",
                                  R"({"project":"vision","concurrent_jobs":1,"gpus":4})"});
  ASSERT_EQ(set.code, 0) << set.err;
  submit("alice", "vision", "none", "first");
  auto client = server_->client(tokens_.at("alice"));
  Json body = job_body("vision", "none", {"sleep", "120"});
  body["spec"]["cpu_milli"] = 0;
  auto refused = client->request("POST", "/v1/jobs", body.dump());
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 422);
  EXPECT_THAT(refused->body, HasSubstr("concurrent_jobs asked 1, used 1, limit 1"));

  Ran quota = cnlab(home("alice"), {"quota"});
  ASSERT_EQ(quota.code, 0) << quota.err;
  EXPECT_THAT(quota.out, AllOf(HasSubstr("vision-jobs"), HasSubstr("concurrent_jobs")));
  // USED and LIMIT of the concurrent_jobs row.
  std::string row = quota.out.substr(quota.out.find("concurrent_jobs"));
  row = row.substr(0, row.find('\n'));
  EXPECT_THAT(row, testing::MatchesRegex("concurrent_jobs +1 +1 *"));
  Ran json = cnlab(home("alice"), {"quota", "-o", "json"});
  Json item = Json::parse(json.out)["items"][0];
  EXPECT_EQ(item["usage"]["concurrent_jobs"], 1);
  EXPECT_EQ(item["spec"]["concurrent_jobs"], 1);
  // bob's project has no quota: nothing applies to him.
  Ran bobs = cnlab(home("bob"), {"quota"});
  EXPECT_EQ(bobs.code, 0);
  EXPECT_THAT(bobs.out, Not(HasSubstr("vision-jobs")));
}

TEST_F(CliLookTest, ColourOnlyOnATerminalAndNeverWithNoColor) {
  register_fake_node();
  login("admin", server_->admin_token());
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "none", {"sleep", "60"}))["metadata"]["name"];
  Ran piped = cnlab(home("admin"), {"ps"}, {{"TERM", "xterm"}});
  ASSERT_EQ(piped.code, 0);
  EXPECT_THAT(piped.out, HasSubstr("JOB"));
  EXPECT_THAT(piped.out, Not(HasSubstr("\033[")));

  // Under a pseudo-terminal (util-linux script).
  std::string command = std::string(CNLAB_BINARY) + " ps";
  Ran tty = run_in(home("admin"), {"script", "-qec", command, "/dev/null"}, {{"TERM", "xterm"}});
  ASSERT_EQ(tty.code, 0) << tty.err;
  EXPECT_THAT(tty.out, HasSubstr(id));
  EXPECT_THAT(tty.out, HasSubstr("\033[1mJOB"));  // bold headers, phases in colour
  Ran no_colour = run_in(home("admin"), {"script", "-qec", command, "/dev/null"}, {{"TERM", "xterm"}, {"NO_COLOR", "1"}});
  EXPECT_THAT(no_colour.out, HasSubstr(id));
  EXPECT_THAT(no_colour.out, Not(HasSubstr("\033[")));
  Ran dumb = run_in(home("admin"), {"script", "-qec", command, "/dev/null"}, {{"TERM", "dumb"}});
  EXPECT_THAT(dumb.out, AllOf(HasSubstr(id), Not(HasSubstr("\033["))));
}

TEST_F(CliLookTest, AnExpiredTokenSaysHowToLogInAgainWithExit4) {
  // The server allows 30 s of clock skew on `exp`, so a token minted with a TTL of 1 s still works
  // for half a minute: this one, signed with the server's key, expired an hour ago.
  auth::VerifierOptions signing;
  signing.hs256_secret = slurp(dir_.path() + "/signing.key");
  Time now = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
  std::string expired = auth::mint_hs256({"admin", "default", "expired-jti", Duration{60}}, signing, now - kHour);
  fs::create_directories(home("admin") + "/.config/cnlab");
  std::ofstream(home("admin") + "/.config/cnlab/config")
      << Json{{"server", server_->url()}, {"token", expired}, {"ca", server_->ca()}}.dump();
  Ran ran = cnlab(home("admin"), {"ps"});
  EXPECT_EQ(ran.code, 4);
  EXPECT_THAT(ran.err, AllOf(HasSubstr("expired"), HasSubstr("cnlab login --server")));
  EXPECT_EQ(ran.out, "");
  Ran gpus = cnlab(home("admin"), {"gpus"});
  EXPECT_EQ(gpus.code, 4);
}

TEST_F(CliLookTest, AnUnreachableServerIsNamedWithExit5) {
  std::string url = "https://127.0.0.1:" + std::to_string(closed_port());
  fs::create_directories(home("admin") + "/.config/cnlab");
  std::ofstream(home("admin") + "/.config/cnlab/config")
      << Json{{"server", url}, {"token", server_->admin_token()}, {"ca", server_->ca()}}.dump();
  for (const char* command : {"ps", "nodes", "gpus", "quota"}) {
    Ran ran = cnlab(home("admin"), {command});
    EXPECT_EQ(ran.code, 5) << command;
    EXPECT_THAT(ran.err, HasSubstr(url)) << command;
  }
  Ran describe = cnlab(home("admin"), {"describe", "train-00000000"});
  EXPECT_EQ(describe.code, 5);
}

TEST_F(CliLookTest, TheCompletionScriptCoversEveryRoleAndCompletesJobIds) {
  register_fake_node();
  login("admin", server_->admin_token());
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "none", {"sleep", "60"}))["metadata"]["name"];
  Ran script = cnlab(home("admin"), {"completion", "bash"});
  ASSERT_EQ(script.code, 0) << script.err;
  for (const char* word : {"server", "agent", "ps", "describe", "nodes", "gpus", "quota", "login", "admin", "audit", "completion"}) {
    EXPECT_THAT(script.out, HasSubstr(std::string(" ") + word)) << word;
  }
  std::string path = home("admin") + "/cnlab.bash";
  std::ofstream(path) << script.out;
  // bash completes `cnlab describe <TAB>` with the job ids of `cnlab ps -o name`.
  std::string shell = "source " + path + "; COMP_WORDS=(" + std::string(CNLAB_BINARY) +
                      " describe ''); COMP_CWORD=2; _cnlab; echo \"${COMPREPLY[*]}\"";
  Ran completed = run_in(home("admin"), {"bash", "-c", shell});
  EXPECT_THAT(completed.out, HasSubstr(id)) << completed.err;
  Ran bad = cnlab(home("admin"), {"completion", "fish"});
  EXPECT_EQ(bad.code, 2);
}

TEST_F(CliLookTest, EveryLookAroundCommandHasHelpWithAnExample) {
  for (const char* command : {"login", "ps", "describe", "nodes", "gpus", "quota", "completion", "audit", "admin"}) {
    Ran help = cnlab(home("admin"), {command, "--help"});
    EXPECT_EQ(help.code, 0) << command;
    EXPECT_THAT(help.out, HasSubstr("Example:\n  cnlab " + std::string(command))) << command;
  }
}

}  // namespace
}  // namespace cnlab::server::test_support
