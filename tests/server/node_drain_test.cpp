// An operator's drain (POST /v1/nodes/{name}/drain) against the real server: the node's running
// checkpointable jobs are asked to migrate live to another node, two at a time, smallest first;
// what cannot move stays; a move that failed is not asked again at once. The agents' side of a
// move is in tests/e2e/migration_test.cpp (DrainTest there drains a node of real agents).
#include <gmock/gmock.h>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class NodeDrainTest : public ClusterTest {
 protected:
  // A job Running on gpu-1 (the only node when it is placed), asking `memory_mib`.
  std::string running_job(int64_t memory_mib, bool checkpointable = true) {
    if (!source_) source_ = server_->client(register_peer("gpu-1", 8000));
    return running_on(*source_, 1000, memory_mib, checkpointable);
  }
  // A job Running on the node of `agent` (the only schedulable one when it is placed).
  std::string running_on(net::Client& agent, int64_t cpu_milli, int64_t memory_mib = 100, bool checkpointable = true,
                         const std::string& gpu = "none") {
    Json body = job_body("default", gpu, {"sleep", "100"});
    body["spec"]["checkpointable"] = checkpointable;
    body["spec"]["cpu_milli"] = cpu_milli;
    body["spec"]["memory_mib"] = memory_mib;
    std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    EXPECT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
    call(agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
    return id;
  }
  std::string moving_to(const std::string& id) {
    const Json status = get_job(*admin_, id)["status"];
    return status.contains("migration") ? status["migration"].value("to", "") : "";
  }

  // The reasons of the job's NotMovedForDrain events, in order.
  std::vector<std::string> not_moved(const std::string& id) {
    std::vector<std::string> reasons;
    const Json job = get_job(*admin_, id);
    for (const auto& e : job["status"]["events"]) {
      if (e["type"] == "NotMovedForDrain") reasons.push_back(e["reason"]);
    }
    return reasons;
  }

  std::unique_ptr<net::Client> source_;
};

TEST_F(NodeDrainTest, ADrainedNodesCheckpointableJobsMoveTwoAtATimeAndTheRestStay) {
  const std::string small = running_job(100), middle = running_job(200), large = running_job(300);
  const std::string plain = running_job(50, /*checkpointable=*/false);
  register_peer("gpu-2", 8000);
  // Cordoned, nothing moves.
  call(*admin_, "POST", "/v1/nodes/gpu-1/cordon", 200);
  std::this_thread::sleep_for(1500ms);
  for (const auto& id : {small, middle, large, plain}) EXPECT_EQ(moving_to(id), "") << id;

  const Json drained = call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200);
  EXPECT_EQ(drained["status"]["phase"], "Draining");
  EXPECT_EQ(call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]["bound_jobs"], 4) << "what the drain waits for";
  EXPECT_EQ(call(*admin_, "GET", "/v1/nodes/gpu-2", 200)["status"]["bound_jobs"], 0);
  ASSERT_TRUE(eventually([&] { return moving_to(small) == "gpu-2" && moving_to(middle) == "gpu-2"; }, 5s))
      << get_job(*admin_, small).dump();
  const Json asked = get_job(*admin_, small);
  EXPECT_THAT(asked["status"]["events"].back()["reason"].get<std::string>(),
              HasSubstr("migration from gpu-1 to gpu-2 to drain gpu-1"));
  // Two moves under way: the largest waits, and the job that cannot move stays.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(moving_to(large), "");
  EXPECT_EQ(moving_to(plain), "");

  // The source could not dump one: it carries on on gpu-1, the next job's move is asked for, and
  // the one that failed is not asked again at once.
  call(*source_, "PUT", "/v1/jobs/" + small + "/status", 200, {{"phase", "Running"}, {"migration_failed", "CRIU failed"}});
  ASSERT_TRUE(eventually([&] { return moving_to(large) == "gpu-2"; }, 5s));
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(moving_to(small), "") << "asked again right after its move failed";
  EXPECT_EQ(moving_to(plain), "") << "not checkpointable: it runs to its end on the drained node";
  // It says so, once, for its user's `cnlab describe`; the failed move's own event says why it stays.
  const auto plain_reasons = not_moved(plain);
  ASSERT_EQ(plain_reasons.size(), 1u) << get_job(*admin_, plain).dump();
  EXPECT_EQ(plain_reasons[0],
            "node gpu-1 drains, and the job cannot move: the job is not checkpointable (spec.checkpointable); it runs "
            "to its end there");
  EXPECT_TRUE(not_moved(small).empty()) << get_job(*admin_, small).dump();

  const std::string audit = call(*admin_, "GET", "/v1/audit?limit=100", 200).dump();
  EXPECT_THAT(audit, HasSubstr("node-drain"));
  EXPECT_THAT(audit, HasSubstr("drain of gpu-1"));
}

// A job moving off a draining node is bound to its target once the source hands its dump over,
// but the source holds it frozen until it runs there (a target that cannot restore it hands it
// back): the drain still waits for it, as `migrating_jobs`, until the target reports it running.
TEST_F(NodeDrainTest, AMoveHandedOverKeepsTheDrainWaitingUntilTheJobRunsOnItsTarget) {
  const std::string id = running_job(100);
  auto target = server_->client(register_peer("gpu-2", 8000));
  call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200);
  ASSERT_TRUE(eventually([&] { return moving_to(id) == "gpu-2"; }, 5s)) << get_job(*admin_, id).dump();
  call(*source_, "PUT", "/v1/jobs/" + id + "/status", 200,
       {{"phase", "Running"}, {"migration_handed_over", {{"dump_digest", "sha256:" + std::string(64, 'a')}}}});
  ASSERT_EQ(get_job(*admin_, id)["status"]["placement"][0]["node"], "gpu-2");
  const Json held = call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"];
  EXPECT_EQ(held["bound_jobs"], 0) << held.dump();
  EXPECT_EQ(held.value("migrating_jobs", 0), 1) << held.dump();
  int listed = -1;
  const Json nodes = call(*admin_, "GET", "/v1/nodes", 200);
  for (const Json& node : nodes["items"]) {
    if (node["metadata"]["name"] == "gpu-1") listed = node["status"].value("migrating_jobs", 0);
  }
  EXPECT_EQ(listed, 1) << "the list says so too";
  EXPECT_FALSE(call(*admin_, "GET", "/v1/nodes/gpu-2", 200)["status"].contains("migrating_jobs"));

  call(*target, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  const Json left = call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"];
  EXPECT_EQ(left["bound_jobs"], 0) << left.dump();
  EXPECT_FALSE(left.contains("migrating_jobs")) << left.dump();
}

TEST_F(NodeDrainTest, AJobNoOtherNodeHasRoomForStaysUntilOneDoes) {
  const std::string id = running_job(100);
  register_peer("tiny", 500);  // less CPU free than the job asks
  call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(moving_to(id), "");
  const auto reasons = not_moved(id);  // passes went by: said once
  ASSERT_EQ(reasons.size(), 1u) << get_job(*admin_, id).dump();
  EXPECT_THAT(reasons[0], HasSubstr("node gpu-1 drains; the job moves off it once it can: no other node can take job"));
  register_peer("roomy", 8000);
  ASSERT_TRUE(eventually([&] { return moving_to(id) == "roomy"; }, 5s)) << get_job(*admin_, id).dump();
}

// A drain packs what it moves, as the scheduler's power-down drains do: onto the node it leaves
// fullest, never onto an idle node while a busy one has room (the idle one can power down).
TEST_F(NodeDrainTest, ADrainMovesAJobOntoTheFullestBusyNodeNotAnIdleOne) {
  const std::string id = running_job(100);
  call(*admin_, "POST", "/v1/nodes/gpu-1/cordon", 200);
  // Named so that neither the first nor the roomiest is the one to choose.
  auto packed = server_->client(register_peer("packed", 8000));
  running_on(*packed, 4000);
  call(*admin_, "POST", "/v1/nodes/packed/cordon", 200);
  auto light = server_->client(register_peer("light", 8000));
  running_on(*light, 1000);
  call(*admin_, "POST", "/v1/nodes/packed/uncordon", 200);
  register_peer("idle", 64000);

  call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200);
  ASSERT_TRUE(eventually([&] { return !moving_to(id).empty(); }, 5s)) << get_job(*admin_, id).dump();
  EXPECT_EQ(moving_to(id), "packed");
}

// Between busy nodes with GPUs, the one whose GPU the job leaves fullest, even with more CPU free.
TEST_F(NodeDrainTest, ADrainMovesAGpuJobOntoTheGpuItLeavesFullest) {
  auto gpu_peer = [&](const std::string& name) {  // one H100; its agent checkpoints GPU state
    Json node = node_object(name, "h100", 1, 8000, 512 * 1024, "127.0.0.1:7443");
    node["status"]["gpu_checkpoint"] = true;
    return server_->client(register_node(name, "h100", 1, node));
  };
  auto source = gpu_peer("gpu-1");
  const std::string id = running_on(*source, 1000, 100, true, "h100-25");
  call(*admin_, "POST", "/v1/nodes/gpu-1/cordon", 200);
  auto fuller = gpu_peer("fuller");  // 25 blocks left free once the job is there, 6000 milli of CPU
  running_on(*fuller, 1000, 100, true, "h100-50");
  call(*admin_, "POST", "/v1/nodes/fuller/cordon", 200);
  auto emptier = gpu_peer("emptier");  // 50 blocks left, 3000 milli
  running_on(*emptier, 4000, 100, true, "h100-25");
  call(*admin_, "POST", "/v1/nodes/fuller/uncordon", 200);

  call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200);
  ASSERT_TRUE(eventually([&] { return !moving_to(id).empty(); }, 5s)) << get_job(*admin_, id).dump();
  EXPECT_EQ(moving_to(id), "fuller");
}

// A job bound to the node that has not started yet is not started there only to be moved or
// waited for: it goes back to the queue and starts elsewhere, as Kubernetes evicts a pending pod.
TEST_F(NodeDrainTest, AJobBoundToTheNodeThatHasNotStartedGoesBackToTheQueueAndStartsElsewhere) {
  source_ = server_->client(register_peer("gpu-1", 8000));
  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["cpu_milli"] = 1000;
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  register_peer("gpu-2", 8000);

  call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200);
  ASSERT_TRUE(eventually([&] {
    const Json job = get_job(*admin_, id);
    return job["status"]["phase"] == "Scheduled" && job["status"]["placement"][0]["node"] == "gpu-2";
  }, 5s)) << get_job(*admin_, id).dump();
  EXPECT_THAT(get_job(*admin_, id)["status"]["events"].dump(),
              HasSubstr("node gpu-1 drains, and the job had not started there; requeued to start again"));
  // Its first agent, late, may not start it now: the job is no longer its to see.
  call(*source_, "PUT", "/v1/jobs/" + id + "/status", 404, {{"phase", "Running"}});
  EXPECT_EQ(call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]["bound_jobs"], 0);
  EXPECT_THAT(call(*admin_, "GET", "/v1/audit?limit=100", 200).dump(), HasSubstr("jobs.requeue"));
}

// A gang never moves (only single-node jobs migrate): it says so, and runs on where it is.
TEST_F(NodeDrainTest, AGangOnADrainingNodeSaysItRunsToItsEndThere) {
  std::map<std::string, std::unique_ptr<net::Client>> agents;
  for (const std::string node : {"gpu-1", "gpu-2"}) agents[node] = server_->client(register_node(node, "h100", 8));
  Json body = job_body("default", "h100x16");
  body["spec"]["checkpointable"] = true;  // which alone does not move it
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  for (const auto& [node, agent] : agents) call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  register_node("gpu-3", "h100", 8);

  call(*admin_, "POST", "/v1/nodes/gpu-2/drain", 200);
  ASSERT_TRUE(eventually([&] { return !not_moved(id).empty(); }, 5s)) << get_job(*admin_, id).dump();
  std::this_thread::sleep_for(1500ms);
  const auto reasons = not_moved(id);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0],
            "node gpu-2 drains, and the job cannot move: a gang job (several nodes) does not migrate; it runs to its "
            "end there");
  EXPECT_EQ(moving_to(id), "");
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Running");
}

// `--requeue`: what cannot move live is taken back to the queue, as `kubectl drain` evicts; what can
// still moves live.
TEST_F(NodeDrainTest, ADrainWithRequeueRequeuesWhatCannotMoveLiveAndStillMovesTheRest) {
  const std::string movable = running_job(100);
  const std::string plain = running_job(50, /*checkpointable=*/false);
  // Checkpointable, but holding a GPU on a node that does not checkpoint GPU state.
  const std::string on_gpu = running_on(*source_, 1000, 100, /*checkpointable=*/true, "h100-25");
  register_peer("gpu-2", 8000);
  Json node = call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200, {{"requeue", true}});
  EXPECT_EQ(node["spec"].value("drain_requeues", false), true);

  ASSERT_TRUE(eventually([&] { return moving_to(movable) == "gpu-2"; }, 5s)) << get_job(*admin_, movable).dump();
  // The plain job starts again on gpu-2.
  ASSERT_TRUE(eventually([&] {
    const Json job = get_job(*admin_, plain);
    return job["status"]["phase"] == "Scheduled" && job["status"]["placement"][0]["node"] == "gpu-2";
  }, 5s)) << get_job(*admin_, plain).dump();
  EXPECT_THAT(get_job(*admin_, plain)["status"]["events"].dump(),
              HasSubstr("node gpu-1 drains with --requeue, and the job cannot move live: the job is not checkpointable "
                        "(spec.checkpointable); requeued to start again from the beginning"));
  EXPECT_TRUE(not_moved(plain).empty());
  // The GPU job waits for gpu-1 to stop it and store the checkpoint it saves as it stops.
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, on_gpu)["status"]["phase"] == "Pending"; }, 5s));
  const Json waiting = get_job(*admin_, on_gpu)["status"];
  EXPECT_EQ(waiting["awaiting_release"]["nodes"], Json::array({"gpu-1"})) << waiting.dump();
  EXPECT_THAT(waiting["events"].dump(),
              HasSubstr("node gpu-1 drains with --requeue, and the job cannot move live: the job holds GPUs"));
  EXPECT_THAT(waiting["events"].dump(), HasSubstr("requeued to resume from the checkpoint taken as it stops"));
  // Until then the drain is not over: the node still counts it.
  EXPECT_EQ(call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"].value("releasing_jobs", 0), 1);
  call(*source_, "POST", "/v1/jobs/" + on_gpu + "/release", 200, {{"message", "it saved nothing to resume from"}});
  EXPECT_FALSE(call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"].contains("releasing_jobs"));
  ASSERT_TRUE(wait_for_phase(*admin_, on_gpu, "Scheduled"));
  const std::string audit = call(*admin_, "GET", "/v1/audit?limit=200", 200).dump();
  EXPECT_THAT(audit, HasSubstr("\"action\":\"jobs.requeue\""));
  EXPECT_THAT(audit, HasSubstr("\"reason\":\"the job is not checkpointable (spec.checkpointable)\""));
}

TEST_F(NodeDrainTest, OnlyADrainTakesARequeueWhichAHeartbeatKeepsAndUncordonEnds) {
  register_peer("gpu-1", 8000);
  auto agent = server_->client(register_peer("gpu-2", 8000));
  Json bad = call(*admin_, "POST", "/v1/nodes/gpu-2/drain", 400, {{"requeue", "yes"}});
  EXPECT_EQ(bad["error"]["field"], "requeue") << bad.dump();
  bad = call(*admin_, "POST", "/v1/nodes/gpu-2/drain", 400, {{"evict", true}});
  EXPECT_EQ(bad["error"]["field"], "evict") << bad.dump();
  bad = call(*admin_, "POST", "/v1/nodes/gpu-2/cordon", 400, {{"requeue", true}});
  EXPECT_THAT(bad.dump(), HasSubstr("cordon and uncordon take no body"));
  EXPECT_EQ(call(*admin_, "GET", "/v1/nodes/gpu-2", 200)["status"]["phase"], "Ready") << "nothing changed";

  call(*admin_, "POST", "/v1/nodes/gpu-2/drain", 200, {{"requeue", true}});
  call(*agent, "PUT", "/v1/nodes/gpu-2/heartbeat", 200, node_object("gpu-2", "h100", 1, 8000, 512 * 1024, "127.0.0.1:7443"));
  EXPECT_EQ(call(*admin_, "GET", "/v1/nodes/gpu-2", 200)["spec"].value("drain_requeues", false), true);
  call(*admin_, "POST", "/v1/nodes/gpu-2/uncordon", 200);
  EXPECT_FALSE(call(*admin_, "GET", "/v1/nodes/gpu-2", 200)["spec"].contains("drain_requeues"));
  call(*admin_, "POST", "/v1/nodes/gpu-2/drain", 200);  // a plain drain leaves what cannot move
  EXPECT_FALSE(call(*admin_, "GET", "/v1/nodes/gpu-2", 200)["spec"].contains("drain_requeues"));
}

}  // namespace
}  // namespace cnlab::server::test_support
