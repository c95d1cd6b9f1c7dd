// A real server and real agents (`cnlab agent` on simulated GPUs) for end-to-end tests: adding
// nodes, submitting jobs, reading their logs and waiting for their end, as a user of the API would.
#pragma once

#include <gmock/gmock.h>

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <sstream>

#include "agent_process.h"
#include "fixtures.h"

namespace cnlab::server::test_support {

using namespace std::chrono_literals;

class AgentCluster : public ClusterTest {
 protected:
  void start_cluster(std::vector<std::string> server_flags) {
    // Jobs run as nobody when the test runs as root: they must pass through the agents' directory.
    ::chmod(nodes_.path().c_str(), 0711);
    start_server(std::move(server_flags));
  }

  std::string join_token() { return call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}})["token"]; }

  AgentProcess& add_agent(const std::string& name, std::string gpus = "h100x2", std::vector<std::string> extra = {}) {
    AgentProcess::Options options{name, std::move(gpus), run_as_, std::move(extra)};
    agents_.push_back(std::make_unique<AgentProcess>(*server_, join_token(), nodes_.path() + "/agent-" + name, options));
    // Ready once the server has its heartbeat. Registering makes it Ready; an agent that takes live
    // migrations reports its peer endpoint, started after it registered, with its first heartbeat.
    const bool takes_migrations = agents_.back()->log().find("live migrations on") != std::string::npos;
    EXPECT_TRUE(eventually([&] {
      auto r = admin_->request("GET", "/v1/nodes/" + name);
      if (!r || r->status != 200) return false;
      const Json status = Json::parse(r->body)["status"];
      return status["phase"] == "Ready" && (!takes_migrations || !status.value("peer_address", "").empty());
    }));
    return *agents_.back();
  }

  std::string submit(const std::vector<std::string>& command, const std::string& gpu = "h100-25", int64_t memory_mib = 256,
                     Json extra_spec = Json::object()) {
    Json body = job_body("default", gpu, command);
    body["spec"]["memory_mib"] = memory_mib;
    for (auto& [k, v] : extra_spec.items()) body["spec"][k] = v;
    return call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  }

  std::vector<Json> logs(const std::string& id) {
    auto r = admin_->request("GET", "/v1/jobs/" + id + "/logs");
    std::vector<Json> lines;
    if (!r || r->status != 200) return lines;
    std::stringstream in(r->body);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) lines.push_back(Json::parse(line));
    }
    return lines;
  }
  std::vector<std::string> texts(const std::vector<Json>& lines) {
    std::vector<std::string> out;
    for (const auto& l : lines) out.push_back(l["text"]);
    return out;
  }
  std::string node_of(const std::string& id) { return get_job(*admin_, id)["status"]["placement"][0]["node"]; }

  // An agent stopped with SIGTERM leaves its jobs running, for the next one to adopt, and a test
  // that fails mid-way (or kills an agent) may not have ended its jobs: once the agents have
  // stopped, every process left that works in, or was started from, their data directories is
  // killed (job processes, restored ones, their shims), so that no test leaves processes behind.
  // Only this test's directories are looked at: tests running beside it keep theirs.
  void TearDown() override {
    agents_.clear();
    const std::string under = nodes_.path() + "/";
    const std::string self = std::to_string(::getpid());
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc", ec); !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const std::string pid = it->path().filename();
      if (pid.find_first_not_of("0123456789") != std::string::npos || pid == self) continue;
      std::error_code link_ec;
      const std::string cwd = std::filesystem::read_symlink(it->path() / "cwd", link_ec).string() + "/";
      if (cwd.rfind(under, 0) == 0 || read_proc_file(it->path() / "cmdline").find(under) != std::string::npos) {
        ::kill(std::stoi(pid), SIGKILL);
      }
    }
  }

  TempDir nodes_;  // the agents' data directories (the server's is dir_)
  std::string run_as_ = ::geteuid() == 0 ? "nobody" : "";  // whom the agents run jobs as
  std::vector<std::unique_ptr<AgentProcess>> agents_;
};

}  // namespace cnlab::server::test_support
