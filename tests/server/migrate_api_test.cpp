// `cnlab migrate` and `cnlab checkpoint` as the API takes them (POST /v1/jobs/{id}/migrate and
// /checkpoint): who may ask, which jobs can move, and which nodes can take them. The agents' side
// (dumping, streaming, restoring) is in tests/e2e/migration_test.cpp.
#include <gmock/gmock.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class MigrateApiTest : public ClusterTest {
 protected:
  // A checkpointable job asking `cpu_milli` of host CPU, Running on gpu-1 (the only node when it
  // is placed), its agent's credential in source_.
  std::string running_job(int64_t cpu_milli, const std::string& project = "default") {
    if (!source_) source_ = server_->client(register_peer("gpu-1", 8000));
    Json body = job_body(project, "none", {"sleep", "100"});
    body["spec"]["checkpointable"] = true;
    body["spec"]["cpu_milli"] = cpu_milli;
    std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    EXPECT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
    call(*source_, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
    return id;
  }
  // A node of `gpus` H100s whose agent takes migrating jobs and checkpoints GPU state; returns
  // its agent's credential.
  std::string gpu_peer(const std::string& name, int gpus = 1, int64_t cpu_milli = 64000) {
    Json node = node_object(name, "h100", gpus, cpu_milli, 512 * 1024, "127.0.0.1:7443");
    node["status"]["gpu_checkpoint"] = true;
    return register_node(name, "h100", gpus, node);
  }
  // A checkpointable job asking `gpu`, placed and reported Running by `agent` (its node's).
  std::string running_gpu_job(const std::string& gpu, net::Client& agent) {
    Json body = job_body("default", gpu, {"sleep", "100"});
    body["spec"]["checkpointable"] = true;
    std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    EXPECT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
    call(agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
    return id;
  }
  Json migrate(const std::string& id, int status, const Json& body = Json::object()) {
    return call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", status, body);
  }

  std::unique_ptr<net::Client> source_;
};

TEST_F(MigrateApiTest, AnotherProjectsJobIsNotFoundAndAViewerMayNeitherMoveNorCheckpointIt) {
  std::string id = running_job(1000);
  register_peer("gpu-2");
  create_project("vision");
  auto stranger = server_->client(token_for("mallory", "vision", "member"));
  auto viewer = server_->client(token_for("victor", "default", "viewer"));
  for (const std::string verb : {"migrate", "checkpoint"}) {
    Json hidden = call(*stranger, "POST", "/v1/jobs/" + id + "/" + verb, 404, {{"to", "gpu-2"}});
    EXPECT_EQ(hidden["error"]["field"], "job") << hidden.dump();
    Json denied = call(*viewer, "POST", "/v1/jobs/" + id + "/" + verb, 403, {{"to", "gpu-2"}});
    EXPECT_EQ(denied["error"]["code"], "permission_denied") << denied.dump();
  }
  Json job = get_job(*admin_, id);
  EXPECT_FALSE(job["status"].contains("migration")) << job.dump();
  EXPECT_FALSE(job["status"].contains("checkpoint_requested_at")) << job.dump();
  // Refusals are audited without holding up the answer (Api::audit_refusal): soon after it.
  EXPECT_TRUE(eventually([&] {
    return call(*admin_, "GET", "/v1/audit?limit=100", 200).dump().find("jobs.migrate") != std::string::npos;
  })) << "the refused migrations are audited";
}

TEST_F(MigrateApiTest, ATargetThatCannotTakeTheJobIsRefusedSayingWhy) {
  std::string id = running_job(3000);
  register_peer("small", 2000);
  register_node("no-peer", "h100", 1);
  register_peer("cordoned");
  call(*admin_, "POST", "/v1/nodes/cordoned/cordon", 200);

  Json small = migrate(id, 422, {{"to", "small"}});
  EXPECT_EQ(small["error"]["field"], "to") << small.dump();
  EXPECT_THAT(small.dump(), HasSubstr("node small has 2000 milli-CPU")) << small.dump();
  EXPECT_THAT(small.dump(), HasSubstr("the job needs 3000")) << small.dump();
  EXPECT_THAT(migrate(id, 422, {{"to", "no-peer"}}).dump(), HasSubstr("takes no migrations"));
  EXPECT_THAT(migrate(id, 422, {{"to", "cordoned"}}).dump(), HasSubstr("(cordoned)"));
  EXPECT_EQ(migrate(id, 404, {{"to", "node-zzz"}})["error"]["field"], "to");
  EXPECT_EQ(migrate(id, 400, {{"to", "gpu-1"}})["error"]["field"], "to") << "the node it runs on";
  EXPECT_EQ(migrate(id, 400, {{"to", 5}})["error"]["field"], "to");
  EXPECT_EQ(migrate(id, 400, {{"to", ""}})["error"]["field"], "to") << "empty is not the same as left out";
  EXPECT_EQ(migrate(id, 400, {{"node", "small"}})["error"]["field"], "node");
  // Asked for no node: none of these can take it.
  EXPECT_THAT(migrate(id, 422).dump(), HasSubstr("nowhere to migrate it"));
  EXPECT_FALSE(get_job(*admin_, id)["status"].contains("migration"));

  // Without a node named, the one that can take it.
  register_peer("roomy", 16000);
  Json moving = migrate(id, 202);
  EXPECT_EQ(moving["status"]["migration"]["to"], "roomy") << moving.dump();
}

TEST_F(MigrateApiTest, ATargetMustHaveRoomForTheMemoryTheJobsProcessesHoldNotOnlyForItsRequest) {
  // Two jobs that asked for no memory (so they have no limit); their agent measured each holding
  // 6 GiB.
  std::string id = running_job(1000), second = running_job(1000);
  for (const auto& job : {id, second}) {
    call(*source_, "PUT", "/v1/jobs/" + job + "/status", 200, {{"phase", "Running"}, {"memory_used_mib", 6144}});
  }
  register_node("small", "h100", 1, node_object("small", "h100", 1, 64000, 4096, "127.0.0.1:7443"));
  Json refused = migrate(id, 422, {{"to", "small"}});
  EXPECT_THAT(refused.dump(), HasSubstr("node small has 64000 milli-CPU and 4096 MiB of memory free; the job needs 1000 "
                                        "and 6144 (the memory its processes hold, which the move copies)"))
      << refused.dump();
  EXPECT_THAT(migrate(id, 422).dump(), HasSubstr("nowhere to migrate it")) << "nor is it chosen when none is named";

  // Room for what it holds: it moves there, and that room is held for it until it arrives.
  register_node("roomy", "h100", 1, node_object("roomy", "h100", 1, 64000, 10240, "127.0.0.1:7443"));
  EXPECT_EQ(migrate(id, 202)["status"]["migration"]["to"], "roomy");
  Json held = migrate(second, 422, {{"to", "roomy"}});
  EXPECT_THAT(held.dump(), HasSubstr("node roomy has 63000 milli-CPU and 4096 MiB of memory free")) << held.dump();
}

TEST_F(MigrateApiTest, AJobHoldingGpusMovesOnlyOntoANodeThatRestoresGpuStateAndItsGpusAreHeldThere) {
  source_ = server_->client(gpu_peer("gpu-1", 2));
  std::string id = running_gpu_job("h100", *source_);
  if (HasFailure()) return;
  const Json held = get_job(*admin_, id)["status"]["placement"][0]["gpus"][0];

  register_peer("plain");  // takes migrations, but not of GPU state
  Json plain = migrate(id, 422, {{"to", "plain"}});
  EXPECT_THAT(plain.dump(), HasSubstr("node plain does not restore GPU state")) << plain.dump();
  EXPECT_THAT(migrate(id, 422).dump(), HasSubstr("nowhere to migrate it"));
  // The job's GPUs are simulated (these tests' nodes): it holds no device state that a real GPU
  // could resume, and a real GPU's job would hold state no simulated one can.
  Json real = node_object("real", "h100", 2, 64000, 512 * 1024, "127.0.0.1:7443");
  real["status"]["gpu_checkpoint"] = true;
  real["status"]["simulated"] = false;
  for (auto& gpu : real["status"]["gpus"]) gpu["simulated"] = false;
  register_node("real", "h100", 2, real);
  Json mixed = migrate(id, 422, {{"to", "real"}});
  EXPECT_THAT(mixed.dump(), HasSubstr("node real's GPUs are real and node gpu-1's are simulated")) << mixed.dump();
  EXPECT_THAT(migrate(id, 422).dump(), HasSubstr("nowhere to migrate it"));
  call(*admin_, "POST", "/v1/nodes/real/cordon", 200);  // its GPUs stay out of what follows

  gpu_peer("gpu-2", 2);
  Json moving = migrate(id, 202);
  const Json move = moving["status"]["migration"];
  EXPECT_EQ(move["to"], "gpu-2") << moving.dump();
  ASSERT_EQ(move["gpus"].size(), 1u) << moving.dump();
  EXPECT_EQ(move["gpus"][0]["blocks"], held["blocks"]);
  EXPECT_EQ(move["gpus"][0]["vram_mib"], held["vram_mib"]);
  // The GPU it takes on gpu-2 is held for it while it moves: a job needing both of gpu-2's GPUs
  // (gpu-1 keeps only one free) waits.
  Json pair = job_body("default", "h100x2", {"sleep", "100"});
  std::string waiting = call(*admin_, "POST", "/v1/jobs", 201, pair)["metadata"]["name"];
  EXPECT_FALSE(eventually([&] { return get_job(*admin_, waiting)["status"]["phase"] != "Pending"; }, 2s))
      << get_job(*admin_, waiting).dump();
}

TEST_F(MigrateApiTest, AJobInAMigInstanceMovesIntoAnInstanceOfItsProfileMadeOnTheTargetIfNoneIsFree) {
  source_ = server_->client(gpu_peer("gpu-1"));
  const std::string moving = running_gpu_job("h100:3g.40gb", *source_);

  // A target whose GPU is not in MIG mode takes no MIG instance.
  auto target = server_->client(gpu_peer("gpu-2"));
  Json refused = migrate(moving, 422, {{"to", "gpu-2"}});
  EXPECT_THAT(refused.dump(), HasSubstr("node gpu-2 has no h100 GPU in MIG mode with a free 3g.40gb instance or room for one"))
      << refused.dump();

  // gpu-2's GPU goes to MIG for a 1g.10gb job (gpu-1 cordoned so that it lands there).
  call(*admin_, "POST", "/v1/nodes/gpu-1/cordon", 200);
  const std::string small = running_gpu_job("h100:1g.10gb", *target);
  ASSERT_EQ(get_job(*admin_, small)["status"]["placement"][0]["node"], "gpu-2");

  // No free 3g.40gb instance there: one is made beside the 1g.10gb, and the move takes it.
  Json asked = migrate(moving, 202, {{"to", "gpu-2"}});
  const Json move = asked["status"]["migration"];
  ASSERT_EQ(move["gpus"].size(), 1u) << asked.dump();
  const int start = move["gpus"][0]["mig_start"];
  Json layout = call(*admin_, "GET", "/v1/nodes/gpu-2", 200)["status"]["gpus"][0]["mig_instances"];
  ASSERT_EQ(layout.size(), 2u) << layout.dump();
  bool made = false;
  for (const auto& instance : layout) made |= instance["profile"] == "3g.40gb" && instance["start"] == start;
  EXPECT_TRUE(made) << layout.dump() << " start " << start;

  // That instance is the moving job's: another 3g.40gb job on gpu-1 finds none left on gpu-2.
  call(*admin_, "POST", "/v1/nodes/gpu-1/uncordon", 200);
  const std::string second = running_gpu_job("h100:3g.40gb", *source_);
  Json full = migrate(second, 422, {{"to", "gpu-2"}});
  EXPECT_THAT(full.dump(), HasSubstr("no h100 GPU in MIG mode with a free 3g.40gb instance")) << full.dump();
}

TEST_F(MigrateApiTest, RoomPromisedToAMoveUnderWayIsNotPromisedTwice) {
  std::string first = running_job(3000), second = running_job(3000);
  register_peer("gpu-2", 4000);
  EXPECT_EQ(migrate(first, 202, {{"to", "gpu-2"}})["status"]["migration"]["to"], "gpu-2");
  Json refused = migrate(second, 422, {{"to", "gpu-2"}});
  EXPECT_THAT(refused.dump(), HasSubstr("node gpu-2 has 1000 milli-CPU")) << refused.dump();
  EXPECT_THAT(migrate(first, 422, {{"to", "gpu-2"}}).dump(), HasSubstr("already under way"));
}

TEST_F(MigrateApiTest, MovesAskedForAtOnceNeverShareTheRoomOfOneTarget) {
  // Room on gpu-2 for one of these jobs; each asks for it from its own connection at once.
  source_ = server_->client(register_peer("gpu-1", 32000));
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(running_job(3000));
  register_peer("gpu-2", 4000);
  std::vector<int> statuses(ids.size());
  std::vector<std::thread> askers;
  std::atomic<bool> go{false};
  for (size_t i = 0; i < ids.size(); ++i) {
    askers.emplace_back([&, i, client = server_->client(server_->admin_token())]() mutable {
      while (!go) std::this_thread::yield();
      auto response = client->request("POST", "/v1/jobs/" + ids[i] + "/migrate", Json{{"to", "gpu-2"}}.dump());
      statuses[i] = response ? response->status : -1;
    });
  }
  go = true;
  for (auto& asker : askers) asker.join();
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 202), 1) << ::testing::PrintToString(statuses);
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 422), static_cast<long>(ids.size()) - 1);
  int moving = 0;
  for (const auto& id : ids) moving += get_job(*admin_, id)["status"].contains("migration") ? 1 : 0;
  EXPECT_EQ(moving, 1);
}

TEST_F(MigrateApiTest, OnlyARunningCheckpointableJobMoves) {
  source_ = server_->client(register_peer("gpu-1", 8000));
  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["checkpointable"] = true;
  std::string scheduled = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  body["spec"]["checkpointable"] = false;
  std::string plain = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, scheduled, "Scheduled"));
  ASSERT_TRUE(wait_for_phase(*admin_, plain, "Scheduled"));
  call(*source_, "PUT", "/v1/jobs/" + plain + "/status", 200, {{"phase", "Running"}});
  register_peer("gpu-2");

  EXPECT_THAT(migrate(scheduled, 422).dump(), HasSubstr("only a Running job migrates"));
  EXPECT_THAT(call(*admin_, "POST", "/v1/jobs/" + scheduled + "/checkpoint", 409).dump(),
              HasSubstr("only a Running job is checkpointed"));
  EXPECT_THAT(migrate(plain, 422).dump(), HasSubstr("not checkpointable"));
  EXPECT_THAT(call(*admin_, "POST", "/v1/jobs/" + plain + "/checkpoint", 422).dump(), HasSubstr("not checkpointable"));
}

TEST_F(MigrateApiTest, ACheckpointRequestTakesNoFieldsAndABadBodyChangesNothing) {
  std::string id = running_job(1000);
  Json unknown = call(*admin_, "POST", "/v1/jobs/" + id + "/checkpoint", 400, {{"when", "now"}});
  EXPECT_EQ(unknown["error"]["field"], "when") << unknown.dump();
  auto not_json = admin_->request("POST", "/v1/jobs/" + id + "/checkpoint", "now please", {{"content-type", "application/json"}});
  ASSERT_TRUE(not_json);
  EXPECT_EQ(not_json->status, 400) << not_json->body;
  EXPECT_THAT(not_json->body, HasSubstr("\"field\":\"body\""));
  EXPECT_FALSE(get_job(*admin_, id)["status"].contains("checkpoint_requested_at"));
  // Empty, or an empty object: asked.
  auto empty = admin_->request("POST", "/v1/jobs/" + id + "/checkpoint", "", {{"content-type", "application/json"}});
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 202) << empty->body;
  EXPECT_TRUE(call(*admin_, "POST", "/v1/jobs/" + id + "/checkpoint", 202, Json::object())["status"].contains(
      "checkpoint_requested_at"));
}

TEST_F(MigrateApiTest, ACheckpointAskedOfAnEarlierRunIsNotAskedOfTheNext) {
  std::string id = running_job(1000);
  Json asked = call(*admin_, "POST", "/v1/jobs/" + id + "/checkpoint", 202);
  ASSERT_TRUE(asked["status"].contains("checkpoint_requested_at")) << asked.dump();
  // Its run is lost before the agent took it: the job goes back to the queue and runs again.
  call(*source_, "PUT", "/v1/jobs/" + id + "/status", 200,
       {{"phase", "Failed"}, {"requeue", true}, {"message", "its memory did not all arrive"}});
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  Json again = call(*source_, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  EXPECT_EQ(again["status"]["attempts"], 2) << again.dump();
  EXPECT_FALSE(again["status"].contains("checkpoint_requested_at")) << again.dump();
}

TEST_F(MigrateApiTest, AnAgentSaysWhyACheckpointWasNotTakenAndTheJobRunsOn) {
  std::string id = running_job(1000);
  call(*admin_, "POST", "/v1/jobs/" + id + "/checkpoint", 202);
  const std::string path = "/v1/jobs/" + id + "/status";
  Json wrong_phase = call(*source_, "PUT", path, 400, {{"phase", "Succeeded"}, {"checkpoint_failed", "x"}});
  EXPECT_EQ(wrong_phase["error"]["field"], "phase") << wrong_phase.dump();
  Json too_long = call(*source_, "PUT", path, 400, {{"phase", "Running"}, {"checkpoint_failed", std::string(1001, 'x')}});
  EXPECT_EQ(too_long["error"]["field"], "checkpoint_failed") << too_long.dump();
  EXPECT_EQ(call(*source_, "PUT", path, 400, {{"phase", "Running"}, {"checkpoint_failed", 5}})["error"]["field"],
            "checkpoint_failed");
  // Another node's agent may not say it.
  auto other = server_->client(register_peer("gpu-2"));
  call(*other, "PUT", path, 404, {{"phase", "Running"}, {"checkpoint_failed", "not mine"}});

  Json job = call(*source_, "PUT", path, 200, {{"phase", "Running"}, {"checkpoint_failed", "CRIU could not dump it"}});
  EXPECT_EQ(job["status"]["phase"], "Running");
  EXPECT_EQ(job["status"]["events"].back()["type"], "CheckpointFailed") << job.dump();
  EXPECT_EQ(job["status"]["events"].back()["reason"], "not taken on gpu-1: CRIU could not dump it");
  EXPECT_THAT(call(*admin_, "GET", "/v1/audit?limit=100", 200).dump(), HasSubstr("CRIU could not dump it"));
  EXPECT_EQ(metric("cnlab_checkpoints_total{outcome=\"not_taken\"}"), 1);
}

// What the agent measured the job's processes to hold: stored for the scheduler, which prices a move
// by it when it is more than the job asked for.
TEST_F(MigrateApiTest, AnAgentReportsTheMemoryTheJobHoldsAndOnlyWhileItRuns) {
  std::string id = running_job(1000);
  const std::string path = "/v1/jobs/" + id + "/status";
  EXPECT_FALSE(get_job(*admin_, id)["status"].contains("memory_used_mib"));
  Json job = call(*source_, "PUT", path, 200, {{"phase", "Running"}, {"memory_used_mib", 6144}});
  EXPECT_EQ(job["status"]["memory_used_mib"], 6144);
  EXPECT_EQ(job["status"]["phase"], "Running");
  EXPECT_EQ(get_job(*admin_, id)["status"]["memory_used_mib"], 6144);
  call(*source_, "PUT", path, 200, {{"phase", "Running"}, {"memory_used_mib", 5000}});
  EXPECT_EQ(get_job(*admin_, id)["status"]["memory_used_mib"], 5000) << "the latest measure, smaller or not";

  for (const Json& bad : {Json(-1), Json("6Gi"), Json(int64_t{1} << 40)}) {
    Json refused = call(*source_, "PUT", path, 400, {{"phase", "Running"}, {"memory_used_mib", bad}});
    EXPECT_EQ(refused["error"]["field"], "memory_used_mib") << bad.dump();
  }
  Json wrong_phase = call(*source_, "PUT", path, 400, {{"phase", "Succeeded"}, {"memory_used_mib", 10}});
  EXPECT_EQ(wrong_phase["error"]["field"], "phase") << wrong_phase.dump();
  auto other = server_->client(register_peer("gpu-2"));
  call(*other, "PUT", path, 404, {{"phase", "Running"}, {"memory_used_mib", 1}});
  EXPECT_EQ(get_job(*admin_, id)["status"]["memory_used_mib"], 5000);

  // A measurement is no start: on a job bound but not yet reported Running, it changes nothing.
  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["cpu_milli"] = 1000;
  std::string bound = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, bound, "Scheduled"));
  Json unchanged = call(*source_, "PUT", "/v1/jobs/" + bound + "/status", 200, {{"phase", "Running"}, {"memory_used_mib", 700}});
  EXPECT_EQ(unchanged["status"]["phase"], "Scheduled") << unchanged.dump();
  EXPECT_FALSE(unchanged["status"].contains("memory_used_mib"));
}

// The vGPU memory controller's request to move a job off a GPU short of memory (the agent's
// `move_requested`): a live move where another node can take the job, the queue where none can,
// and nothing more while the job is already moving.
TEST_F(MigrateApiTest, AJobNamedToFreeGpuMemoryMovesLiveWhereItCanAndIsRequeuedWhereItCannot) {
  auto types = [&](const std::string& id) {
    std::vector<std::string> out;
    const Json job = get_job(*admin_, id);
    for (const auto& e : job["status"]["events"]) out.push_back(e["type"]);
    return out;
  };
  const Json asked = {{"phase", "Running"}, {"move_requested", "GPU-x short of memory"}};
  std::string alone = running_job(1000);
  call(*source_, "PUT", "/v1/jobs/" + alone + "/status", 200, asked);
  Json requeued = get_job(*admin_, alone);
  EXPECT_EQ(requeued["status"]["phase"], "Pending") << "no other node: back to the queue";
  EXPECT_THAT(types(alone), ::testing::Contains("Preempted"));
  call(*admin_, "POST", "/v1/jobs/" + alone + "/cancel", 200);

  std::string id = running_job(1000);
  register_peer("gpu-2");
  call(*source_, "PUT", "/v1/jobs/" + id + "/status", 200, asked);
  Json moving = get_job(*admin_, id);
  EXPECT_EQ(moving["status"]["phase"], "Running") << moving.dump();
  ASSERT_TRUE(moving["status"].contains("migration")) << moving.dump();
  EXPECT_EQ(moving["status"]["migration"]["to"], "gpu-2");
  EXPECT_THAT(moving["status"]["events"].back()["reason"].get<std::string>(), HasSubstr("to free GPU memory on gpu-1"));
  EXPECT_THAT(types(id), ::testing::Not(::testing::Contains("Preempted")));
  // Asked again while it moves: recorded, and the move goes on.
  call(*source_, "PUT", "/v1/jobs/" + id + "/status", 200, asked);
  Json still = get_job(*admin_, id);
  EXPECT_EQ(still["status"]["phase"], "Running") << still.dump();
  EXPECT_EQ(still["status"]["migration"]["to"], "gpu-2") << still.dump();
  const auto seen = types(id);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "MoveRequested"), 2);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "Preempted"), 0);
}

// A vGPU job can hold more GPU memory than its quota. Named to move, it goes where all it holds
// fits (the agent says how much: `holding_mib`) before the node with the most CPU free, where only
// its quota would; where it fits nowhere, it goes where its quota does. Its quota stays its quota.
TEST_F(MigrateApiTest, AJobNamedToFreeGpuMemoryMovesWhereAllItHoldsFitsAndKeepsItsQuota) {
  // "roomy" has the most CPU free but half its GPU promised; "fits" has all of its GPU free.
  auto roomy = server_->client(gpu_peer("roomy", 1, 128000));
  running_gpu_job("h100-50", *roomy);
  call(*admin_, "POST", "/v1/nodes/roomy/cordon", 200);
  source_ = server_->client(gpu_peer("gpu-1"));
  const std::string first = running_gpu_job("h100-25", *source_);
  const std::string second = running_gpu_job("h100-25", *source_);
  call(*admin_, "POST", "/v1/nodes/roomy/uncordon", 200);
  gpu_peer("fits");
  const Json held = get_job(*admin_, first)["status"]["placement"][0]["gpus"][0];
  const int64_t quota = held["vram_mib"];
  const int64_t gpu_mib = call(*admin_, "GET", "/v1/nodes/fits", 200)["status"]["gpus"][0]["memory_mib"];
  ASSERT_LT(quota, gpu_mib / 2);

  auto asked = [](Json holding) {
    return Json{{"phase", "Running"}, {"move_requested", "GPU-x short of memory"}, {"holding_mib", std::move(holding)}};
  };
  // What the agent says is checked: one whole number of MiB, 0 or more, per GPU of the binding,
  // and only with a move request.
  const std::string status = "/v1/jobs/" + first + "/status";
  EXPECT_EQ(call(*source_, "PUT", status, 400, asked({1, 2}))["error"]["field"], "holding_mib");
  EXPECT_EQ(call(*source_, "PUT", status, 400, asked({-1}))["error"]["field"], "holding_mib[0]");
  EXPECT_EQ(call(*source_, "PUT", status, 400, asked({"lots"}))["error"]["field"], "holding_mib[0]");
  EXPECT_EQ(call(*source_, "PUT", status, 400, {{"phase", "Running"}, {"holding_mib", {5}}})["error"]["field"],
            "holding_mib");
  EXPECT_FALSE(get_job(*admin_, first)["status"].contains("migration"));

  // Holding more than half a GPU: only "fits" has room for it all.
  call(*source_, "PUT", status, 200, asked({gpu_mib * 3 / 4}));
  Json moving = get_job(*admin_, first);
  ASSERT_TRUE(moving["status"].contains("migration")) << moving.dump();
  EXPECT_EQ(moving["status"]["migration"]["to"], "fits") << moving.dump();
  EXPECT_EQ(moving["status"]["migration"]["gpus"][0]["vram_mib"], quota) << moving.dump();

  // Holding more than any GPU has: where its quota fits, the node with the most CPU free.
  call(*source_, "PUT", "/v1/jobs/" + second + "/status", 200, asked({gpu_mib + 1}));
  Json fallback = get_job(*admin_, second);
  ASSERT_TRUE(fallback["status"].contains("migration")) << fallback.dump();
  EXPECT_EQ(fallback["status"]["migration"]["to"], "roomy") << fallback.dump();
  EXPECT_EQ(fallback["status"]["migration"]["gpus"][0]["vram_mib"], quota) << fallback.dump();
}

}  // namespace
}  // namespace cnlab::server::test_support
