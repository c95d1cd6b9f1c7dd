// A checkpointable job pre-empted while it ran waits for the node it ran on to release it (POST
// /v1/jobs/{id}/release) before it starts again anywhere: it never runs in two places, and it
// resumes from the checkpoint taken as it stopped. A lost node, or --release-timeout, lets it go
// without. The agents here are the test's own HTTP calls; tests/e2e/migration_test.cpp has real
// agents pre-empting and resuming a job across two nodes.
#include <gmock/gmock.h>

#include "auth/auth.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

std::string digest_of(const std::string& bytes) { return "sha256:" + auth::sha256_hex(bytes); }

class JobReleaseTest : public ClusterTest {
 protected:
  // gpu-1 runs `victim_` (opportunistic, checkpointable, the whole H100); gpu-2 runs `blocker_`
  // (production); then `urgent_` (production) pre-empts the victim off gpu-1.
  void preempt_victim() {
    if (!node_1_) register_nodes();
    call(*admin_, "POST", "/v1/nodes/gpu-2/cordon", 200);  // so that the victim goes to gpu-1
    victim_ = running("opportunistic", *node_1_, /*checkpointable=*/true);
    call(*admin_, "POST", "/v1/nodes/gpu-2/uncordon", 200);
    blocker_ = running("production", *node_2_, /*checkpointable=*/false);
    ASSERT_EQ(node_of(blocker_), "gpu-2");
    Json body = job_body("default", "h100x1", {"sleep", "100"});
    body["spec"]["priority_class"] = "production";
    urgent_ = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    ASSERT_TRUE(wait_for_phase(*admin_, victim_, "Pending"));
    ASSERT_TRUE(wait_for_phase(*admin_, urgent_, "Scheduled"));
    ASSERT_EQ(node_of(urgent_), "gpu-1");
  }
  void register_nodes() {
    node_1_ = server_->client(register_node("gpu-1", "h100", 1));
    node_2_ = server_->client(register_node("gpu-2", "h100", 1));
  }
  std::string running(const std::string& priority_class, net::Client& agent, bool checkpointable) {
    Json body = job_body("default", "h100x1", {"sleep", "100"});
    body["spec"]["checkpointable"] = checkpointable;
    body["spec"]["priority_class"] = priority_class;
    std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    EXPECT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
    call(agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
    return id;
  }
  std::string node_of(const std::string& id) {
    const Json status = get_job(*admin_, id)["status"];
    return status.contains("placement") ? status["placement"][0].value("node", "") : "";
  }
  // Frees gpu-2: the blocker is cancelled and its agent reports it stopped.
  void free_gpu_2() {
    call(*admin_, "POST", "/v1/jobs/" + blocker_ + "/cancel", 200);
    call(*node_2_, "PUT", "/v1/jobs/" + blocker_ + "/status", 200, {{"phase", "Failed"}, {"signal", 15}});
    ASSERT_TRUE(wait_for_phase(*admin_, blocker_, "Cancelled"));
  }
  std::vector<std::string> reasons(const std::string& id, const std::string& type) {
    std::vector<std::string> out;
    const Json job = get_job(*admin_, id);  // kept: a range over a temporary's member would dangle
    for (const auto& e : job["status"]["events"]) {
      if (e["type"] == type) out.push_back(e.value("reason", ""));
    }
    return out;
  }
  net::ClientResponse release(net::Client& client, const Json& body, const std::string& id = "") {
    auto r = client.request("POST", "/v1/jobs/" + (id.empty() ? victim_ : id) + "/release", body.dump());
    if (!r) throw std::runtime_error(r.error().to_string());
    return *r;
  }
  net::ClientResponse upload(net::Client& client, const std::string& bytes) {
    auto r = client.request("PUT", "/v1/jobs/" + victim_ + "/checkpoint", bytes,
                            {{"Content-Type", "application/octet-stream"}, {"Checkpoint-Digest", digest_of(bytes)}});
    if (!r) throw std::runtime_error(r.error().to_string());
    return *r;
  }

  std::unique_ptr<net::Client> node_1_, node_2_;
  std::string victim_, blocker_, urgent_;
};

TEST_F(JobReleaseTest, APreemptedJobStartsElsewhereOnlyOnceItsNodeHasStoredItsCheckpointAndReleasedIt) {
  preempt_victim();
  Json status = get_job(*admin_, victim_)["status"];
  ASSERT_TRUE(status.contains("awaiting_release")) << status.dump();
  EXPECT_EQ(status["awaiting_release"]["nodes"], Json::array({"gpu-1"}));

  // gpu-2 has room now; the victim still waits, cycle after cycle, saying why.
  free_gpu_2();
  std::this_thread::sleep_for(2500ms);
  status = get_job(*admin_, victim_)["status"];
  EXPECT_EQ(status["phase"], "Pending") << status.dump();
  EXPECT_THAT(status.value("waiting_reason", ""),
              HasSubstr("waiting for node gpu-1 to stop it and store its checkpoint (pre-empted "));

  // gpu-1's agent stopped it, uploads what it took and releases it: it starts on gpu-2, from that.
  ASSERT_EQ(upload(*node_1_, "taken as it stopped").status, 201);
  auto released = release(*node_1_, {{"checkpoint", digest_of("taken as it stopped")}});
  ASSERT_EQ(released.status, 200) << released.body;
  ASSERT_TRUE(wait_for_phase(*admin_, victim_, "Scheduled"));
  EXPECT_EQ(node_of(victim_), "gpu-2");
  status = get_job(*admin_, victim_)["status"];
  EXPECT_FALSE(status.contains("awaiting_release"));
  EXPECT_EQ(status["checkpoint"]["digest"], digest_of("taken as it stopped"));
  const auto said = reasons(victim_, "Released");
  ASSERT_EQ(said.size(), 1u) << get_job(*admin_, victim_)["status"]["events"].dump();
  EXPECT_THAT(said[0], HasSubstr("node gpu-1 stopped it and stored its checkpoint; it starts again from its files "
                                 "checkpoint " + digest_of("taken as it stopped")));
  auto fetched = node_2_->request("GET", "/v1/jobs/" + victim_ + "/checkpoint");
  ASSERT_TRUE(fetched);
  EXPECT_EQ(fetched->body, "taken as it stopped");

  // Said again (an agent retrying), it changes nothing.
  ASSERT_EQ(release(*node_1_, Json::object()).status, 200);
  EXPECT_EQ(reasons(victim_, "Released").size(), 1u);
  EXPECT_EQ(node_of(victim_), "gpu-2");
  Json audit = call(*admin_, "GET", "/v1/audit?limit=1000", 200);
  EXPECT_THAT(audit.dump(), HasSubstr("\"action\":\"jobs.release\""));
}

TEST_F(JobReleaseTest, ANodeReleasingWithoutACheckpointSaysWhyAndTheJobStartsFromTheOneBefore) {
  preempt_victim();
  free_gpu_2();
  ASSERT_EQ(release(*node_1_, {{"message", "it saved nothing to resume from"}}).status, 200);
  ASSERT_TRUE(wait_for_phase(*admin_, victim_, "Scheduled"));
  const auto said = reasons(victim_, "Released");
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0], "node gpu-1 stopped it without a new checkpoint (it saved nothing to resume from); it starts "
                     "again from the beginning");
}

TEST_F(JobReleaseTest, OnlyANodeThatRanTheJobReleasesItAndABadBodyIsRefusedNamingTheField) {
  preempt_victim();
  const std::string alice = token_for("alice", "default", "member");
  auto user = server_->client(alice);
  EXPECT_EQ(release(*user, Json::object()).status, 403);
  EXPECT_EQ(release(*node_2_, Json::object()).status, 404) << "gpu-2 never ran it";
  EXPECT_EQ(release(*node_1_, Json::object(), "no-such-job").status, 404);
  auto bad = release(*node_1_, {{"checkpoint", "md5:abc"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("checkpoint"));
  bad = release(*node_1_, {{"released", true}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("released"));
  bad = release(*node_1_, {{"message", std::string(1001, 'x')}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("message"));
  // None of it let the job go.
  EXPECT_TRUE(get_job(*admin_, victim_)["status"].contains("awaiting_release"));
  EXPECT_TRUE(reasons(victim_, "Released").empty());
}

TEST_F(JobReleaseTest, AJobCancelledWhileItWaitsEndsCancelledAndWaitsNoMore) {
  preempt_victim();
  call(*admin_, "POST", "/v1/jobs/" + victim_ + "/cancel", 200);
  Json status = get_job(*admin_, victim_)["status"];
  EXPECT_EQ(status["phase"], "Cancelled");
  EXPECT_FALSE(status.contains("awaiting_release"));
  // Its node's late checkpoint and release change nothing.
  EXPECT_EQ(upload(*node_1_, "too late").status, 409);
  EXPECT_EQ(release(*node_1_, Json::object()).status, 200);
  EXPECT_EQ(get_job(*admin_, victim_)["status"]["phase"], "Cancelled");
}

// A node still stopping a job taken off it is not idle (it could otherwise be picked for power-down
// while it dumps): here a drain with --requeue leaves gpu-1 nothing but the job it is releasing.
TEST_F(JobReleaseTest, ANodeStillStoppingAJobTakenOffItIsNotIdle) {
  register_nodes();
  call(*admin_, "POST", "/v1/nodes/gpu-2/cordon", 200);
  victim_ = running("dev", *node_1_, /*checkpointable=*/true);
  auto node_1 = [&] { return call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]; };
  call(*admin_, "POST", "/v1/nodes/gpu-2/uncordon", 200);
  ASSERT_TRUE(eventually([&] { return !node_1().contains("idle_since"); }, 5s)) << "it runs a job";
  // The victim cannot move live (it holds a GPU, and gpu-1 does not checkpoint GPU state).
  call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200, {{"requeue", true}});
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, victim_)["status"].contains("awaiting_release"); }, 5s));
  std::this_thread::sleep_for(1500ms);  // a cycle or more
  EXPECT_FALSE(node_1().contains("idle_since")) << node_1().dump();
  EXPECT_EQ(node_1().value("releasing_jobs", 0), 1);
  ASSERT_EQ(release(*node_1_, Json::object()).status, 200);
  EXPECT_TRUE(eventually([&] { return node_1().contains("idle_since"); }, 5s)) << node_1().dump();
}

class JobReleaseTimeoutTest : public JobReleaseTest {
 protected:
  void SetUp() override { start_server({"--release-timeout", "2s"}); }
};

TEST_F(JobReleaseTimeoutTest, AJobItsNodeNeverReleasesStartsAgainAfterTheTimeout) {
  preempt_victim();
  free_gpu_2();
  ASSERT_TRUE(eventually([&] { return node_of(victim_) == "gpu-2"; }, 15s));
  const auto said = reasons(victim_, "Released");
  ASSERT_EQ(said.size(), 1u);
  EXPECT_EQ(said[0], "node gpu-1 did not release it within 2s (--release-timeout); it starts again from the beginning");
}

class JobReleaseLostNodeTest : public JobReleaseTest {
 protected:
  void SetUp() override { start_server({"--not-ready-after", "1s", "--lost-after", "2s"}); }
};

TEST_F(JobReleaseLostNodeTest, AJobWhoseNodeIsLostWaitsNoLonger) {
  // Both nodes heartbeat (a silent node takes no work after 1 s) until the pre-emption is done.
  register_nodes();
  std::atomic<bool> node_1_beats{true}, stop{false};
  std::thread heartbeats([&] {
    while (!stop) {
      if (node_1_beats) (void)node_1_->request("PUT", "/v1/nodes/gpu-1/heartbeat", node_object("gpu-1", "h100", 1).dump());
      (void)node_2_->request("PUT", "/v1/nodes/gpu-2/heartbeat", node_object("gpu-2", "h100", 1).dump());
      std::this_thread::sleep_for(200ms);
    }
  });
  preempt_victim();
  // gpu-1 falls silent and is lost: the victim is let go, without the checkpoint gpu-1 never sent.
  node_1_beats = false;
  EXPECT_TRUE(eventually([&] { return call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]["phase"] == "Lost"; }, 15s));
  EXPECT_TRUE(eventually([&] { return reasons(victim_, "Released").size() == 1; }, 10s));
  stop = true;
  heartbeats.join();
  ASSERT_EQ(reasons(victim_, "Released").size(), 1u);
  EXPECT_EQ(reasons(victim_, "Released")[0], "node gpu-1 was lost; it starts again from the beginning");
  EXPECT_FALSE(get_job(*admin_, victim_)["status"].contains("awaiting_release"));
}

}  // namespace
}  // namespace cnlab::server::test_support
