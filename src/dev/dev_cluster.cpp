#include "dev/dev_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "common/json_reader.h"
#include "net/net.h"
#include "server/server.h"

namespace cnlab::dev {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kDefaultSimulatedGpus = "h100x2";

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "dev";
  return name;
}

Result<std::string> read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error::internal("cannot read the admin token " + path);
  std::string token;
  std::getline(in, token);
  if (token.empty()) return Error::internal("the admin token " + path + " is empty");
  return token;
}

// What `cnlab dev` prints about simulated GPUs: they are never mistaken for real ones.
std::string describe_simulated(const std::string& spec, bool defaulted) {
  return "simulated GPUs " + spec + (defaulted ? " (no NVIDIA GPU found here; choose with --simulate-gpus)" : "");
}

class DevClusterImpl final : public DevCluster {
 public:
  DevClusterImpl(std::unique_ptr<server::ControlPlane> plane, std::unique_ptr<agent::Agent> agent, DevInfo info)
      : plane_(std::move(plane)), agent_(std::move(agent)), info_(std::move(info)) {}
  ~DevClusterImpl() override { stop(); }

  const DevInfo& info() const override { return info_; }

  void stop() override {
    if (agent_) agent_->stop(/*stop_jobs=*/true);  // while the server still hears the reports
    agent_.reset();
    if (plane_) plane_->stop();
    plane_.reset();
  }

 private:
  std::unique_ptr<server::ControlPlane> plane_;
  std::unique_ptr<agent::Agent> agent_;
  DevInfo info_;
};

// A join token is needed only until the agent has stored its node credential.
Result<std::string> mint_join_token(const net::ClientOptions& admin) {
  auto client = net::Client::connect(admin);
  if (!client) return client.error();
  auto response = (*client)->request("POST", "/v1/join-tokens", R"({"ttl":"10m","max_uses":1})",
                                     {{"content-type", "application/json"}});
  if (!response) return response.error();
  if (response->status != 201) return net::error_from_response(response->status, response->body, "creating a join token");
  Json body = Json::parse(response->body, nullptr, false);
  if (!body.is_object() || !body["token"].is_string()) return Error::internal("the join-token answer has no token");
  return body["token"].get<std::string>();
}

// The node is Ready with its GPUs once the agent's registration and first heartbeat are in.
Status wait_until_ready(const net::ClientOptions& admin, const std::string& node, std::chrono::seconds limit) {
  auto client = net::Client::connect(admin);
  if (!client) return client.error();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string last = "not registered";
  while (std::chrono::steady_clock::now() < deadline) {
    auto response = (*client)->request("GET", "/v1/nodes/" + node, "", {});
    if (response && response->status == 200) {
      Json body = Json::parse(response->body, nullptr, false);
      if (body.is_object()) {
        last = body["status"].value("phase", "");
        if (last == "Ready") return Status::ok();
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  return Error::of(ErrorCode::kUnavailable, "", "", "node " + node + " did not become Ready within " + std::to_string(limit.count()) +
                            " s (phase: " + last + ")");
}

}  // namespace

std::string default_data_dir() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/cnlab";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/cnlab";
}

Result<std::unique_ptr<DevCluster>> DevCluster::start(const DevConfig& config) {
  if (config.data_dir.empty()) return Error::invalid_argument("--data-dir", "", "required");
  std::error_code ec;
  const std::string server_dir = config.data_dir + "/server";
  const std::string agent_dir = config.data_dir + "/agent";
  fs::create_directories(config.data_dir, ec);
  if (ec) return Error::invalid_argument("--data-dir", config.data_dir, "cannot create it: " + ec.message());
  ::chmod(config.data_dir.c_str(), 0700);

  if (!fs::exists(server_dir + "/ca.pem", ec)) {
    server::InitOptions init{server_dir, {host_name()}};
    if (auto done = server::init_data_dir(init); !done) return done.error();
    spdlog::info("dev: prepared a new data directory dir=\"{}\"", server_dir);
  }
  server::ServerConfig server_config;
  server_config.data_dir = server_dir;
  server_config.listen = config.listen;
  if (config.policy) server_config.policy = *config.policy;
  auto plane = server::ControlPlane::start(server_config);
  if (!plane) return plane.error();

  DevInfo info;
  info.url = (*plane)->url();
  info.ca_file = fs::absolute(server_dir + "/ca.pem").string();
  auto token = read_token(server_dir + "/admin.token");
  if (!token) return token.error();
  info.admin_token = *token;
  net::ClientOptions admin{info.url, info.ca_file, info.admin_token};

  agent::AgentConfig agent_config;
  agent_config.server = info.url;
  agent_config.ca_file = info.ca_file;
  agent_config.data_dir = agent_dir;
  agent_config.node_name = config.node_name.empty() ? host_name() : config.node_name;
  agent_config.metrics_listen = config.metrics_listen;
  agent_config.stop_grace = config.stop_grace;
  agent_config.heartbeat_interval = std::chrono::milliseconds(2000);
  agent_config.shim_command = agent::default_shim_command();
  if (!config.simulate_gpus.empty()) {
    agent_config.simulate_gpus = config.simulate_gpus;
    info.gpus = describe_simulated(config.simulate_gpus, false);
  } else if (int found = agent::count_nvidia_gpus(); found > 0) {
    info.gpus = std::to_string(found) + " NVIDIA GPU" + (found == 1 ? "" : "s") + " (NVML)";
  } else {
    agent_config.simulate_gpus = kDefaultSimulatedGpus;
    info.gpus = describe_simulated(kDefaultSimulatedGpus, true);
  }
  if (!fs::exists(agent_dir + "/node.json", ec)) {
    auto join = mint_join_token(admin);
    if (!join) {
      (*plane)->stop();
      return join.error();
    }
    agent_config.join_token = *join;
  }
  auto agent = agent::Agent::start(agent_config);
  if (!agent) {
    (*plane)->stop();
    return agent.error();
  }
  info.node = (*agent)->node_name();
  if (auto ready = wait_until_ready(admin, info.node, std::chrono::seconds(30)); !ready) {
    (*agent)->stop(false);
    (*plane)->stop();
    return ready.error();
  }
  return std::unique_ptr<DevCluster>(new DevClusterImpl(std::move(*plane), std::move(*agent), std::move(info)));
}

}  // namespace cnlab::dev
