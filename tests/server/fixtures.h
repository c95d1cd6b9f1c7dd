// A cluster for the API tests: a running server, an admin client, and helpers that create projects,
// users with roles, and nodes registered through a join token as an agent would.
#pragma once

#include <gtest/gtest.h>

#include "model/model.h"
#include "server_process.h"

namespace cnlab::server::test_support {

// `peer_address`: where its agent takes migrating jobs ("": it takes none).
inline Json node_object(const std::string& name, const std::string& gpu_model, int gpus, int64_t cpu_milli = 64000,
                        int64_t memory_mib = 512 * 1024, const std::string& peer_address = "") {
  model::Node node = model::simulated_node(name, *model::parse_model(gpu_model, "model"), gpus, cpu_milli, memory_mib);
  node.peer_address = peer_address;
  return model::to_json(node);
}

inline Json job_body(const std::string& project, const std::string& gpu, std::vector<std::string> command = {"true"}) {
  return {{"metadata", {{"name", "train"}}},
          {"spec", {{"project", project}, {"gpu", gpu}, {"command", command}, {"cpu_milli", 1000}, {"memory_mib", 1024}}}};
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override { start_server({}); }

  void start_server(std::vector<std::string> extra) {
    server_ = std::make_unique<ServerProcess>(dir_.path(), std::move(extra));
    admin_ = server_->client(server_->admin_token());
  }

  void create_project(const std::string& name) {
    call(*admin_, "POST", "/v1/projects", 201, {{"metadata", {{"name", name}}}});
  }

  // A token for `user` with `role` in `project` (minted by the admin).
  std::string token_for(const std::string& user, const std::string& project, const std::string& role) {
    Json made = call(*admin_, "POST", "/v1/tokens", 201,
                     {{"user", user}, {"project", project}, {"role", role}, {"ttl", "1h"}});
    return made["token"];
  }

  // Registers a node with a fresh join token; returns the node's credential.
  std::string register_node(const std::string& name, const std::string& gpu_model, int gpus, Json node = nullptr) {
    Json join = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}});
    auto anonymous = server_->client("");
    if (node.is_null()) node = node_object(name, gpu_model, gpus);
    Json registered = call(*anonymous, "POST", "/v1/nodes", 201, {{"join_token", join["token"]}, {"node", node}});
    return registered["token"];
  }

  // A node of one H100 whose agent takes migrating jobs (it reported a peer endpoint).
  std::string register_peer(const std::string& name, int64_t cpu_milli = 64000) {
    return register_node(name, "h100", 1, node_object(name, "h100", 1, cpu_milli, 512 * 1024, "127.0.0.1:7443"));
  }

  Json get_job(net::Client& client, const std::string& id) { return call(client, "GET", "/v1/jobs/" + id, 200); }

  // The value of one series (`name{labels}` as rendered) on the server's /metrics; -1 when absent.
  double metric(const std::string& series) {
    auto scraped = server_->client("")->request("GET", "/metrics");
    const std::string text = scraped ? "\n" + scraped->body : "";
    const size_t at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 2));
  }

  bool wait_for_phase(net::Client& client, const std::string& id, const std::string& phase) {
    return eventually([&] { return get_job(client, id)["status"]["phase"] == phase; });
  }

  // The job once it has ended (Succeeded, Failed, Cancelled), or as it is after `timeout`.
  Json wait_for_end(const std::string& id, std::chrono::milliseconds timeout = std::chrono::seconds(40)) {
    Json job;
    eventually(
        [&] {
          job = get_job(*admin_, id);
          std::string phase = job["status"]["phase"];
          return phase == "Succeeded" || phase == "Failed" || phase == "Cancelled";
        },
        timeout);
    return job;
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<net::Client> admin_;
};

}  // namespace cnlab::server::test_support
