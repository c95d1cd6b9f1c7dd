// `cnlab dev` end to end: one process that is a whole cluster, a CLI configured at once, state kept
// across a restart, running jobs stopped on Ctrl-C.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dev_process.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using namespace std::chrono_literals;

class DevTest : public ::testing::Test {
 protected:
  std::string home() const { return dir_.path() + "/home"; }
  std::string data() const { return dir_.path() + "/data"; }

  void SetUp() override {
    std::filesystem::create_directories(home());
    // Jobs run as the user who started `cnlab dev`; the agent's directories sit below data().
    ::chmod(dir_.path().c_str(), 0711);
  }

  // A client with the credential `cnlab dev` wrote for the CLI.
  std::unique_ptr<net::Client> cli_client(const DevProcess& dev) {
    Json config = Json::parse(slurp(dev.config_file()));
    auto client = net::Client::connect({config["server"], config["ca"], config["token"]});
    if (!client) throw std::runtime_error(client.error().to_string());
    return std::move(*client);
  }

  std::string submit(net::Client& client, const std::vector<std::string>& command) {
    Json body = job_body("default", "h100-25", command);
    body["spec"]["memory_mib"] = 256;
    return call(client, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  }

  std::string phase(net::Client& client, const std::string& id) {
    return call(client, "GET", "/v1/jobs/" + id, 200)["status"]["phase"];
  }

  std::vector<std::string> log_texts(net::Client& client, const std::string& id) {
    auto r = client.request("GET", "/v1/jobs/" + id + "/logs");
    std::vector<std::string> texts;
    if (!r || r->status != 200) return texts;
    std::stringstream in(r->body);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) texts.push_back(Json::parse(line)["text"]);
    }
    return texts;
  }

  TempDir dir_;
};

TEST_F(DevTest, StartsAWholeClusterAndConfiguresTheCliOfTheSameHome) {
  DevProcess dev(home(), data(), {"--simulate-gpus", "h100x1,l4x2", "--name", "laptop"});
  EXPECT_EQ(dev.url().rfind("https://127.0.0.1:", 0), 0u) << dev.url();

  struct stat st{};
  ASSERT_EQ(::stat(dev.config_file().c_str(), &st), 0) << "no CLI config written";
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the config holds the admin credential";
  Json config = Json::parse(slurp(dev.config_file()));
  EXPECT_EQ(config["server"], dev.url());

  // The node is Ready with its simulated GPUs by the time the URL is printed.
  auto client = cli_client(dev);
  Json node = call(*client, "GET", "/v1/nodes/laptop", 200);
  EXPECT_EQ(node["status"]["phase"], "Ready");
  ASSERT_EQ(node["status"]["gpus"].size(), 3u);
  EXPECT_EQ(node["status"]["gpus"][0]["model"], "h100");
  EXPECT_EQ(node["status"]["gpus"][2]["model"], "l4");
  EXPECT_TRUE(node["status"]["simulated"].get<bool>());

  // A job submitted at once runs as the user who started `cnlab dev`.
  std::string id = submit(*client, {"sh", "-c", "id -u"});
  ASSERT_TRUE(eventually([&] { return phase(*client, id) == "Succeeded"; }, 30s)) << phase(*client, id);
  EXPECT_EQ(log_texts(*client, id), std::vector<std::string>{std::to_string(::geteuid())});
  EXPECT_EQ(dev.stop(SIGINT), 0);
}

TEST_F(DevTest, WithoutAGpuItSimulatesTwoH100sAndSaysSo) {
  // The build machine has no NVIDIA driver: the default is announced as simulated.
  if (std::filesystem::exists("/dev/nvidiactl")) GTEST_SKIP() << "this machine has an NVIDIA GPU: the default is real GPUs";
  DevProcess dev(home(), data());
  EXPECT_NE(dev.banner().find("simulated GPUs h100x2"), std::string::npos) << dev.banner();
  EXPECT_NE(dev.banner().find("no NVIDIA GPU found"), std::string::npos) << dev.banner();
  EXPECT_EQ(dev.stop(SIGINT), 0);
}

TEST_F(DevTest, ARestartKeepsFinishedJobsAndTheirLogs) {
  std::string id;
  {
    DevProcess dev(home(), data());
    auto client = cli_client(dev);
    id = submit(*client, {"sh", "-c", "echo first; echo second; echo third"});
    ASSERT_TRUE(eventually([&] { return phase(*client, id) == "Succeeded"; }, 30s));
    ASSERT_EQ(log_texts(*client, id), (std::vector<std::string>{"first", "second", "third"}));
    EXPECT_EQ(dev.stop(SIGINT), 0);
  }
  DevProcess again(home(), data());
  auto client = cli_client(again);
  EXPECT_EQ(phase(*client, id), "Succeeded");
  EXPECT_EQ(log_texts(*client, id), (std::vector<std::string>{"first", "second", "third"}));
  // The same node came back (its credential was kept), not a second one.
  Json nodes = call(*client, "GET", "/v1/nodes", 200);
  EXPECT_EQ(nodes["items"].size(), 1u);
}

TEST_F(DevTest, CtrlCStopsTheRunningJobsAndTheirStopIsRecorded) {
  std::string id;
  const std::string marker = "cnlab-dev-test-" + std::to_string(::getpid());
  {
    DevProcess dev(home(), data());
    auto client = cli_client(dev);
    id = submit(*client, {"sh", "-c", "echo started; exec sleep 300 # " + marker});
    ASSERT_TRUE(eventually([&] { return phase(*client, id) == "Running"; }, 30s));
    EXPECT_EQ(dev.stop(SIGINT), 0);
  }
  // No process of the job outlives the cluster.
  EXPECT_TRUE(eventually([&] { return !process_with(marker); }, 5s));
  DevProcess again(home(), data());
  auto client = cli_client(again);
  // Ended by the cluster's stop, not by the job, and saying so.
  const Json job = call(*client, "GET", "/v1/jobs/" + id, 200);
  EXPECT_EQ(job["status"]["phase"], "Failed") << job.dump();
  EXPECT_THAT(job["status"].value("message", ""), ::testing::HasSubstr("stopped (signal 15): the agent of "));
  EXPECT_THAT(job["status"].value("message", ""), ::testing::HasSubstr("stopped it as it stopped itself"));
  EXPECT_EQ(log_texts(*client, id), std::vector<std::string>{"started"});
}

TEST_F(DevTest, ASchedulerConfigSetsTheEmbeddedSchedulersPolicyAndABadOneIsAClearError) {
  // A node idle past power_down_after (1s here, 30m by default) is named a power-down candidate.
  const std::string config = dir_.path() + "/scheduler.json";
  { std::ofstream(config) << R"({"power_down_after": "1s", "max_migrations_per_cycle": 4})"; }
  DevProcess dev(home(), data(), {"--scheduler-config", config});
  auto client = cli_client(dev);
  Json node;
  EXPECT_TRUE(eventually([&] {
    node = call(*client, "GET", "/v1/nodes", 200)["items"][0];
    return node["status"].value("power_down_candidate", false);
  }, 30s)) << node.dump();
  EXPECT_EQ(dev.stop(SIGINT), 0);

  { std::ofstream(config) << R"({"max_moves_per_job": 0})"; }
  auto [status, out] = run_cnlab({"dev", "--data-dir", data(), "--listen", "127.0.0.1:0", "--scheduler-config", config});
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("max_moves_per_job"), std::string::npos) << out;
}

TEST_F(DevTest, AnUnusableDataDirectoryIsAClearErrorNotACrash) {
  std::string file = dir_.path() + "/not-a-dir";
  { std::ofstream(file) << "x"; }
  auto [status, out] = run_cnlab({"dev", "--data-dir", file + "/sub", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("--data-dir"), std::string::npos) << out;
}

}  // namespace
}  // namespace cnlab::server::test_support
