// Moves for room and drains through the control plane, and the nodes it reports for power-down:
// with migration for room on (--scheduler-config), a cycle that moves a running job asks its agents
// for a live migration, as `cnlab migrate` does, and binds the job it made room for; a move the
// cluster cannot carry out is not even decided; a node idle for power_down_after is served as a
// power-down candidate.
#include <gmock/gmock.h>

#include <fstream>
#include <thread>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;

class SchedulerMovesTest : public ClusterTest {
 protected:
  void SetUp() override {
    std::ofstream(config_dir_.path() + "/scheduler.json") << R"({"max_migrations_per_cycle": 4})";
    start_server({"--scheduler-config", config_dir_.path() + "/scheduler.json"});
  }

  // Registers a node of `gpus` H100s, 4 cores and 16 GiB, whose agent takes migrating jobs unless
  // `takes_migrations` is false, and checkpoints GPU state when `gpu_checkpoint`; its GPUs are
  // simulated unless `real`. Returns a client with its credential.
  std::unique_ptr<net::Client> add_node(const std::string& name, int gpus, bool takes_migrations = true,
                                        bool gpu_checkpoint = false, bool real = false) {
    Json join = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}});
    auto anonymous = server_->client("");
    Json node = node_object(name, "h100", gpus, 4000, 16 * 1024, takes_migrations ? "127.0.0.1:7443" : "");
    if (gpu_checkpoint) node["status"]["gpu_checkpoint"] = true;
    if (real) {
      node["status"]["simulated"] = false;
      for (auto& gpu : node["status"]["gpus"]) gpu["simulated"] = false;
    }
    Json registered = call(*anonymous, "POST", "/v1/nodes", 201, {{"join_token", join["token"]}, {"node", node}});
    return server_->client(registered["token"]);
  }

  // Submits a checkpointable job and has the agent of the node it is bound to report it Running.
  std::string run_job(const std::string& gpu, int64_t cpu_milli, const std::string& expected_node) {
    Json body = job_body("default", gpu, {"sleep", "100"});
    body["spec"]["checkpointable"] = true;
    body["spec"]["cpu_milli"] = cpu_milli;
    std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    EXPECT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
    EXPECT_EQ(get_job(*admin_, id)["status"]["placement"][0]["node"], expected_node);
    call(*agents_.at(expected_node), "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
    return id;
  }

  // One running job on each of two nodes: n2 is cordoned while the first starts, n1 while the
  // second does.
  std::pair<std::string, std::string> one_job_per_node(const std::string& gpu, int64_t cpu_milli) {
    call(*admin_, "POST", "/v1/nodes/n2/cordon", 200);
    std::string first = run_job(gpu, cpu_milli, "n1");
    call(*admin_, "POST", "/v1/nodes/n2/uncordon", 200);
    call(*admin_, "POST", "/v1/nodes/n1/cordon", 200);
    std::string second = run_job(gpu, cpu_milli, "n2");
    call(*admin_, "POST", "/v1/nodes/n1/uncordon", 200);
    return {first, second};
  }

  // The server again, with the scheduler policy `config` (JSON) from --scheduler-config.
  void restart_with_policy(const std::string& config) {
    server_->stop(SIGTERM);
    std::ofstream(config_dir_.path() + "/policy.json") << config;
    start_server({"--scheduler-config", config_dir_.path() + "/policy.json"});
  }

  std::string server_log() const { return slurp(server_->data_dir() + "/server.log"); }
  // The waiting job waits, neither running job moves, and the scheduler decides no move at all: it
  // plans none the nodes cannot carry out (sched/node_traits.h), so the server refuses none.
  void expect_waits_without_moves(const std::string& waiting, const std::string& first, const std::string& second) {
    ASSERT_TRUE(eventually([&] { return !get_job(*admin_, waiting)["status"].value("waiting_reason", "").empty(); }));
    std::this_thread::sleep_for(std::chrono::seconds(2));  // cycles come at least every second
    EXPECT_EQ(get_job(*admin_, waiting)["status"]["phase"], "Pending");
    EXPECT_FALSE(get_job(*admin_, first)["status"].contains("migration"));
    EXPECT_FALSE(get_job(*admin_, second)["status"].contains("migration"));
    EXPECT_EQ(server_log().find("scheduler move"), std::string::npos) << server_log();
  }

  TempDir config_dir_;
  std::map<std::string, std::unique_ptr<net::Client>> agents_;
};

TEST_F(SchedulerMovesTest, AJobIsMigratedOffANodeToMakeRoomForAWaitingOne) {
  agents_["n1"] = add_node("n1", 1);
  agents_["n2"] = add_node("n2", 1);
  auto [first, second] = one_job_per_node("none", 1000);
  // Four cores: a whole node, which only a move frees.
  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["cpu_milli"] = 4000;
  std::string waiting = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, waiting, "Scheduled"));
  Json placed = get_job(*admin_, waiting);
  const std::string room = placed["status"]["placement"][0]["node"];
  const std::string moved = room == "n1" ? first : second, other = room == "n1" ? "n2" : "n1";
  Json mover = get_job(*admin_, moved);
  ASSERT_TRUE(mover["status"].contains("migration")) << mover.dump();
  EXPECT_EQ(mover["status"]["migration"]["to"], other);
  EXPECT_THAT(mover["status"]["events"].dump(),
              HasSubstr("migration from " + room + " to " + other + " decided by the scheduler to make room for job " +
                        waiting));
  EXPECT_FALSE(get_job(*admin_, room == "n1" ? second : first)["status"].contains("migration"));
  // The decision is audited with the scheduler's others.
  auto audit = admin_->request("GET", "/v1/audit?limit=10000");
  ASSERT_TRUE(audit);
  EXPECT_THAT(audit->body, HasSubstr("\"decision\":\"migrate\""));
}

TEST_F(SchedulerMovesTest, JobsHoldingGpusAreNotMovedByDefault) {
  agents_["n1"] = add_node("n1", 2);
  agents_["n2"] = add_node("n2", 2);
  auto [first, second] = one_job_per_node("h100x1", 1000);
  std::string waiting = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x2"))["metadata"]["name"];
  expect_waits_without_moves(waiting, first, second);
}

TEST_F(SchedulerMovesTest, AMoveTheNodesCannotCarryOutIsNotDecidedAndTheWaitingJobWaits) {
  // An operator says GPU memory can move; the agents cannot move it (no cuda-checkpoint), so the
  // scheduler plans no such move (BetweenNodesThatCheckpointGpuState... below moves one).
  restart_with_policy(R"({"max_migrations_per_cycle": 4, "migrate_gpu_jobs": true})");
  agents_["n1"] = add_node("n1", 2);
  agents_["n2"] = add_node("n2", 2);
  auto [first, second] = one_job_per_node("h100x1", 1000);
  std::string waiting = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x2"))["metadata"]["name"];
  expect_waits_without_moves(waiting, first, second);
}

TEST_F(SchedulerMovesTest, AJobHoldingGpusIsNotMovedBetweenSimulatedAndRealGpus) {
  // Both agents checkpoint GPU state, but a simulated GPU's job holds none a real GPU could
  // resume, and a real GPU's holds state a simulated one cannot.
  restart_with_policy(R"({"max_migrations_per_cycle": 4, "migrate_gpu_jobs": true})");
  agents_["n1"] = add_node("n1", 2, true, /*gpu_checkpoint=*/true);
  agents_["n2"] = add_node("n2", 2, true, /*gpu_checkpoint=*/true, /*real=*/true);
  auto [first, second] = one_job_per_node("h100x1", 1000);
  std::string waiting = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x2"))["metadata"]["name"];
  expect_waits_without_moves(waiting, first, second);
}

TEST_F(SchedulerMovesTest, BetweenNodesThatCheckpointGpuStateAJobHoldingAGpuMovesOntoTheGpuChosenForIt) {
  restart_with_policy(R"({"max_migrations_per_cycle": 4, "migrate_gpu_jobs": true})");
  agents_["n1"] = add_node("n1", 2, true, /*gpu_checkpoint=*/true);
  agents_["n2"] = add_node("n2", 2, true, /*gpu_checkpoint=*/true);
  auto [first, second] = one_job_per_node("h100x1", 1000);
  std::string waiting = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x2"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, waiting, "Scheduled")) << server_log();
  const std::string room = get_job(*admin_, waiting)["status"]["placement"][0]["node"];
  const std::string other = room == "n1" ? "n2" : "n1";
  const Json move = get_job(*admin_, room == "n1" ? first : second)["status"]["migration"];
  EXPECT_EQ(move["to"], other) << move.dump();
  // The scheduler's GPU on the target, held for the job: not the one the other job holds there.
  ASSERT_EQ(move["gpus"].size(), 1u) << move.dump();
  const Json held_there = get_job(*admin_, room == "n1" ? second : first)["status"]["placement"][0]["gpus"][0];
  EXPECT_NE(move["gpus"][0]["index"], held_there["index"]);
  EXPECT_EQ(move["gpus"][0]["blocks"], 100);
}

TEST_F(SchedulerMovesTest, AJobInAMigInstanceMovesIntoAnInstanceMadeForItWhoseLayoutIsWrittenWithTheMove) {
  restart_with_policy(R"({"max_migrations_per_cycle": 4, "migrate_gpu_jobs": true})");
  agents_["n1"] = add_node("n1", 2, true, /*gpu_checkpoint=*/true);
  agents_["n2"] = add_node("n2", 1, true, /*gpu_checkpoint=*/true);
  // m, in a 3g.40gb instance, holds 3 of n1's 4 cores; n2's only GPU is in MIG mode for a
  // 1g.10gb job, with no 3g.40gb instance.
  call(*admin_, "POST", "/v1/nodes/n2/cordon", 200);
  const std::string m = run_job("h100:3g.40gb", 3000, "n1");
  call(*admin_, "POST", "/v1/nodes/n2/uncordon", 200);
  call(*admin_, "POST", "/v1/nodes/n1/cordon", 200);
  run_job("h100:1g.10gb", 500, "n2");
  call(*admin_, "POST", "/v1/nodes/n1/uncordon", 200);
  ASSERT_EQ(call(*admin_, "GET", "/v1/nodes/n2", 200)["status"]["gpus"][0]["mig_instances"].size(), 1u);

  // w needs a whole GPU and 2 cores: only n1 has a whole GPU, and m holds its cores.
  Json body = job_body("default", "h100");
  body["spec"]["cpu_milli"] = 2000;
  const std::string w = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, w, "Scheduled")) << server_log();
  EXPECT_EQ(get_job(*admin_, w)["status"]["placement"][0]["node"], "n1");
  const Json move = get_job(*admin_, m)["status"]["migration"];
  EXPECT_EQ(move["to"], "n2") << move.dump();
  ASSERT_EQ(move["gpus"].size(), 1u) << move.dump();
  ASSERT_TRUE(move["gpus"][0].contains("mig_start")) << move.dump();
  const int start = move["gpus"][0]["mig_start"];
  // n2's record names the instance the move goes into, beside the 1g.10gb: its agent creates it
  // before the restore.
  const Json layout = call(*admin_, "GET", "/v1/nodes/n2", 200)["status"]["gpus"][0]["mig_instances"];
  ASSERT_EQ(layout.size(), 2u) << layout.dump();
  bool made = false;
  for (const auto& instance : layout) made |= instance["profile"] == "3g.40gb" && instance["start"] == start;
  EXPECT_TRUE(made) << layout.dump() << " start " << start;
}

TEST_F(SchedulerMovesTest, ANodeWhoseAgentTakesNoMigrationsIsNoTarget) {
  agents_["n1"] = add_node("n1", 1, /*takes_migrations=*/false);
  agents_["n2"] = add_node("n2", 1, /*takes_migrations=*/false);
  auto [first, second] = one_job_per_node("none", 1000);
  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["cpu_milli"] = 4000;
  std::string waiting = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  expect_waits_without_moves(waiting, first, second);
}

TEST_F(SchedulerMovesTest, WithDrainsOnALightlyUsedNodeIsEmptiedForPowerDown) {
  restart_with_policy(R"({"max_migrations_per_cycle": 4, "max_drain_moves_per_cycle": 4})");
  agents_["n1"] = add_node("n1", 1);
  agents_["n2"] = add_node("n2", 1);
  // A quarter of each node's cores: once both nodes take work, one job joins the other.
  auto [first, second] = one_job_per_node("none", 1000);
  std::string moved;
  ASSERT_TRUE(eventually([&] {
    for (const std::string& id : {first, second}) {
      if (get_job(*admin_, id)["status"].contains("migration")) moved = id;
    }
    return !moved.empty();
  })) << server_log();
  const std::string from = moved == first ? "n1" : "n2", to = moved == first ? "n2" : "n1";
  Json mover = get_job(*admin_, moved);
  EXPECT_EQ(mover["status"]["migration"]["to"], to);
  EXPECT_THAT(mover["status"]["events"].dump(),
              HasSubstr("migration from " + from + " to " + to + " decided by the scheduler to empty node " + from +
                        " for power-down"));
  EXPECT_FALSE(get_job(*admin_, moved == first ? second : first)["status"].contains("migration"));
}

TEST_F(SchedulerMovesTest, ADrainIsAskedForWholeOrNotAtAll) {
  restart_with_policy(R"({"max_migrations_per_cycle": 4, "max_drain_moves_per_cycle": 4})");
  agents_["n1"] = add_node("n1", 1);
  agents_["n2"] = add_node("n2", 1);
  // n1: a running job and one only Scheduled (its agent has not reported it), which the scheduler
  // sees as running but which cannot migrate yet; n2: three small running jobs.
  call(*admin_, "POST", "/v1/nodes/n2/cordon", 200);
  const std::string running = run_job("none", 1000, "n1");
  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["checkpointable"] = true;
  body["spec"]["cpu_milli"] = 1000;
  const std::string scheduled = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, scheduled, "Scheduled"));
  call(*admin_, "POST", "/v1/nodes/n2/uncordon", 200);
  call(*admin_, "POST", "/v1/nodes/n1/cordon", 200);
  for (int i = 0; i < 3; ++i) run_job("none", 100, "n2");
  call(*admin_, "POST", "/v1/nodes/n1/uncordon", 200);
  // The scheduler drains n1 (two jobs, against n2's three); the Scheduled job's move is refused,
  // so the running one is not moved either.
  ASSERT_TRUE(eventually([&] { return server_log().find("cannot move") != std::string::npos; })) << server_log();
  EXPECT_THAT(server_log(), HasSubstr("job=\"" + running + "\" for=\"power-down\""));
  EXPECT_FALSE(get_job(*admin_, running)["status"].contains("migration"));
  EXPECT_FALSE(get_job(*admin_, scheduled)["status"].contains("migration"));
}

TEST_F(SchedulerMovesTest, ANodeIdleForPowerDownAfterIsShownAsAPowerDownCandidate) {
  restart_with_policy(R"({"power_down_after": "1s"})");
  agents_["n1"] = add_node("n1", 1);
  agents_["n2"] = add_node("n2", 1);
  call(*admin_, "POST", "/v1/nodes/n2/cordon", 200);
  const std::string id = run_job("none", 1000, "n1");
  call(*admin_, "POST", "/v1/nodes/n2/uncordon", 200);
  auto node = [&](const std::string& name) { return call(*admin_, "GET", "/v1/nodes/" + name, 200)["status"]; };
  auto candidates = [&] { return metric("cnlab_nodes_power_down_candidates"); };
  ASSERT_TRUE(eventually([&] { return node("n2").value("power_down_candidate", false); })) << node("n2").dump();
  EXPECT_TRUE(node("n2").contains("idle_since"));
  EXPECT_FALSE(node("n1").contains("power_down_candidate")) << "n1 runs a job";
  EXPECT_FALSE(node("n1").contains("idle_since"));
  EXPECT_EQ(candidates(), 1);
  bool listed = false;
  const Json nodes = call(*admin_, "GET", "/v1/nodes", 200);
  for (const auto& item : nodes["items"]) {
    listed = listed || (item["metadata"]["name"] == "n2" && item["status"].value("power_down_candidate", false));
  }
  EXPECT_TRUE(listed);

  call(*admin_, "POST", "/v1/jobs/" + id + "/cancel", 200);
  call(*agents_.at("n1"), "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Failed"}, {"message", "cancelled"}});
  ASSERT_TRUE(eventually([&] { return node("n1").value("power_down_candidate", false); })) << node("n1").dump();
  EXPECT_EQ(candidates(), 2);
}

TEST_F(SchedulerMovesTest, ABadSchedulerConfigIsRefusedNamingTheField) {
  server_->stop(SIGTERM);
  std::ofstream(config_dir_.path() + "/bad.json") << R"({"max_moves_per_job": 0})";
  auto [status, out] = run_cnlab({"server", "--data-dir", server_->data_dir(), "--listen", "127.0.0.1:0",
                                  "--scheduler-config", config_dir_.path() + "/bad.json"});
  EXPECT_EQ(status, 2);
  EXPECT_THAT(out, HasSubstr("max_moves_per_job"));
  EXPECT_THAT(out, HasSubstr("bad.json"));
}

}  // namespace
}  // namespace cnlab::server::test_support
