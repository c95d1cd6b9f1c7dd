// Jobs through the API: admission, idempotency, quotas, the scheduling loop binding them to nodes,
// the agent's status reports, cancel, logs and waiting reasons.
#include <gmock/gmock.h>

#include <atomic>
#include <set>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;

class JobsTest : public ClusterTest {};

TEST_F(JobsTest, ASubmittedJobIsBoundToAFreeGpuAndRunsToTheEndTheAgentReports) {
  std::string credential = register_node("gpu-1", "h100", 8);
  Json job = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-25"));
  std::string id = job["metadata"]["name"];
  EXPECT_THAT(id, HasSubstr("train-"));
  EXPECT_EQ(job["status"]["phase"], "Pending");
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  Json bound = get_job(*admin_, id);
  ASSERT_EQ(bound["status"]["placement"].size(), 1u);
  EXPECT_EQ(bound["status"]["placement"][0]["node"], "gpu-1");
  EXPECT_EQ(bound["status"]["placement"][0]["gpus"][0]["blocks"], 25);

  auto agent = server_->client(credential);
  // The agent sees it in its node's list.
  Json mine = call(*agent, "GET", "/v1/jobs?node=gpu-1", 200);
  ASSERT_EQ(mine["items"].size(), 1u);
  call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Succeeded"}, {"exit_code", 0}});
  Json done = get_job(*admin_, id);
  EXPECT_EQ(done["status"]["phase"], "Succeeded");
  EXPECT_EQ(done["status"]["exit_code"], 0);
  std::vector<std::string> events;
  for (const auto& e : done["status"]["events"]) events.push_back(e["type"]);
  EXPECT_THAT(events, ::testing::ElementsAre("Queued", "Scheduled", "Started", "Finished"));
}

// A node's list of its jobs (each agent's, whenever it connects) comes whole from the server's cache:
// the jobs bound there, finished ones included, in the full view, with the revision to watch from;
// a user asking for a node's jobs sees only their own projects'; paged, it reads the same.
TEST_F(JobsTest, ANodesJobListHoldsTheJobsBoundThereAndOnlyWhatTheCallerMaySee) {
  std::string credential = register_node("gpu-1", "h100", 1);
  std::string other = register_node("gpu-2", "h200", 1);
  create_project("vision");
  create_project("nlp");
  auto alice = server_->client(token_for("alice", "vision", "member"));
  std::string a = call(*alice, "POST", "/v1/jobs", 201, job_body("vision", "h100-50"))["metadata"]["name"];
  std::string b = call(*admin_, "POST", "/v1/jobs", 201, job_body("nlp", "h100-50"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, a, "Scheduled"));
  ASSERT_TRUE(wait_for_phase(*admin_, b, "Scheduled"));
  std::string waits = call(*admin_, "POST", "/v1/jobs", 201, job_body("nlp", "h100-100"))["metadata"]["name"];
  auto agent = server_->client(credential);
  call(*agent, "PUT", "/v1/jobs/" + a + "/status", 200, {{"phase", "Running"}});
  call(*agent, "PUT", "/v1/jobs/" + a + "/status", 200, {{"phase", "Succeeded"}, {"exit_code", 0}});

  auto ids = [](const Json& listed) {
    std::set<std::string> out;
    for (const auto& job : listed["items"]) out.insert(job["metadata"]["name"].get<std::string>());
    return out;
  };
  Json mine = call(*agent, "GET", "/v1/jobs", 200);
  EXPECT_EQ(ids(mine), (std::set<std::string>{a, b})) << mine.dump();  // not the one still waiting
  EXPECT_GT(mine["revision"].get<int64_t>(), 0);
  for (const auto& job : mine["items"]) {
    EXPECT_GT(job["metadata"]["revision"].get<int64_t>(), 0) << job.dump();
    EXPECT_EQ(job["status"]["placement"][0]["node"], "gpu-1");
    EXPECT_TRUE(job["spec"].contains("command")) << "a node gets the full view";
  }
  EXPECT_TRUE(call(*server_->client(other), "GET", "/v1/jobs", 200)["items"].empty());
  EXPECT_EQ(server_->client(other)->request("GET", "/v1/jobs?node=gpu-1")->status, 403);

  EXPECT_EQ(ids(call(*alice, "GET", "/v1/jobs?node=gpu-1", 200)), (std::set<std::string>{a}));
  EXPECT_EQ(ids(call(*admin_, "GET", "/v1/jobs?node=gpu-1&phase=Scheduled", 200)), (std::set<std::string>{b}));
  EXPECT_EQ(ids(call(*admin_, "GET", "/v1/jobs?node=gpu-1&fieldSelector=spec.project%3Dvision", 200)),
            (std::set<std::string>{a}));
  EXPECT_TRUE(call(*admin_, "GET", "/v1/jobs?node=gpu-9", 200)["items"].empty());
  // Paged, the same list is read from the store a page at a time.
  std::set<std::string> paged;
  std::string token;
  do {
    Json page = call(*admin_, "GET", "/v1/jobs?node=gpu-1&limit=1" + (token.empty() ? "" : "&continue=" + token), 200);
    for (const auto& id : ids(page)) paged.insert(id);
    token = page.value("continue", "");
  } while (!token.empty());
  EXPECT_EQ(paged, (std::set<std::string>{a, b}));
  EXPECT_EQ(get_job(*admin_, waits)["status"]["phase"], "Pending");  // bound nowhere, listed nowhere
}

TEST_F(JobsTest, TheSameIdempotencyKeyReturnsTheSameJobAndADifferentBodyIsRefused) {
  register_node("gpu-1", "h100", 8);
  std::map<std::string, std::string> key = {{"Idempotency-Key", "submit-1"}};
  Json first = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-25"), key);
  Json again = call(*admin_, "POST", "/v1/jobs", 200, job_body("default", "h100-25"), key);
  EXPECT_EQ(first["metadata"]["name"], again["metadata"]["name"]);
  auto changed = admin_->request("POST", "/v1/jobs", job_body("default", "h100-50").dump(), key);
  EXPECT_EQ(changed->status, 422);
  Json all = call(*admin_, "GET", "/v1/jobs", 200);
  EXPECT_EQ(all["items"].size(), 1u);
}

TEST_F(JobsTest, ConcurrentSubmitsWithOneKeyMakeOneJob) {
  register_node("gpu-1", "h100", 8);
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::set<std::string> ids;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      auto client = server_->client(server_->admin_token());
      auto r = client->request("POST", "/v1/jobs", job_body("default", "h100-25").dump(), {{"Idempotency-Key", "same"}});
      Json j = Json::parse(r->body);
      std::lock_guard lock(mutex);
      ids.insert(j["metadata"]["name"].get<std::string>());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(call(*admin_, "GET", "/v1/jobs", 200)["items"].size(), 1u);
}

TEST_F(JobsTest, AdmissionRefusesWhatCanNeverFitWithTheReason) {
  register_node("gpu-1", "h100", 8);
  auto refused = [&](const Json& body) {
    auto r = admin_->request("POST", "/v1/jobs", body.dump());
    EXPECT_EQ(r->status, 422) << r->body;
    return Json::parse(r->body)["error"]["message"].get<std::string>();
  };
  EXPECT_THAT(refused(job_body("default", "h100x16")), HasSubstr("can never fit"));
  EXPECT_THAT(refused(job_body("default", "l4-10")), HasSubstr("no node has a GPU of this model"));
  Json late = job_body("default", "h100-25");
  late["spec"]["deadline"] = "2020-01-01T00:00:00Z";
  EXPECT_THAT(refused(late), HasSubstr("deadline has passed"));
  Json tight = job_body("default", "h100-25");
  auto soon = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()) + kHour;
  tight["spec"]["deadline"] = format_rfc3339(soon);
  tight["spec"]["estimated_duration"] = "3h";
  EXPECT_THAT(refused(tight), HasSubstr("cannot be met"));
  // Bad input is 400 naming the field.
  Json bad = job_body("default", "h100-250");
  auto r = admin_->request("POST", "/v1/jobs", bad.dump());
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(Json::parse(r->body)["error"]["field"], "spec.gpu");
  // A job without a command.
  Json none = job_body("default", "h100-25", {});
  EXPECT_EQ(admin_->request("POST", "/v1/jobs", none.dump())->status, 400);
}

TEST_F(JobsTest, QuotaRefusesOverTheLimitWithTheNumbersAndBorrowingAdmitsAsPreemptible) {
  register_node("gpu-1", "h100", 8);
  create_project("vision");
  auto alice = server_->client(token_for("alice", "vision", "member"));
  call(*admin_, "PUT", "/v1/quotas/vision", 200, {{"spec", {{"project", "vision"}, {"gpus", 1}}}});
  call(*alice, "POST", "/v1/jobs", 201, job_body("vision", "h100-50"));
  call(*alice, "POST", "/v1/jobs", 201, job_body("vision", "h100-50"));
  auto over = alice->request("POST", "/v1/jobs", job_body("vision", "h100-25").dump());
  ASSERT_EQ(over->status, 422);
  std::string message = Json::parse(over->body)["error"]["message"];
  EXPECT_THAT(message, HasSubstr("asked 0.25"));
  EXPECT_THAT(message, HasSubstr("used 1"));
  EXPECT_THAT(message, HasSubstr("limit 1"));

  call(*admin_, "PUT", "/v1/quotas/vision", 200, {{"spec", {{"project", "vision"}, {"gpus", 1}, {"borrowing", true}}}});
  Json borrowed = call(*alice, "POST", "/v1/jobs", 201, job_body("vision", "h100-25"));
  EXPECT_EQ(borrowed["spec"]["priority_class"], "opportunistic");
}

TEST_F(JobsTest, APendingJobShowsTheSchedulersReasonAndCancelEndsIt) {
  register_node("gpu-1", "l4", 1);
  std::string first = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "l4"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, first, "Scheduled"));
  std::string second = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "l4"))["metadata"]["name"];
  ASSERT_TRUE(eventually([&] {
    return !get_job(*admin_, second)["status"].value("waiting_reason", "").empty() &&
           get_job(*admin_, second)["status"]["waiting_reason"] != "waiting for the next scheduling cycle";
  }));
  Json cancelled = call(*admin_, "POST", "/v1/jobs/" + second + "/cancel", 200, Json::object());
  EXPECT_EQ(cancelled["status"]["phase"], "Cancelled");
  EXPECT_EQ(admin_->request("POST", "/v1/jobs/" + second + "/cancel", "{}")->status, 409);
}

TEST_F(JobsTest, PendingJobsShowTheirQueuePositionAndReservedStart) {
  register_node("gpu-1", "l4", 1);
  Json running_body = job_body("default", "l4");
  running_body["spec"]["estimated_duration"] = "1h";
  std::string running = call(*admin_, "POST", "/v1/jobs", 201, running_body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, running, "Scheduled"));
  Json waiting_body = job_body("default", "l4");
  waiting_body["spec"]["estimated_duration"] = "10m";
  std::string a = call(*admin_, "POST", "/v1/jobs", 201, waiting_body)["metadata"]["name"];
  std::string b = call(*admin_, "POST", "/v1/jobs", 201, waiting_body)["metadata"]["name"];
  // Positions 1 and 2, in the scheduler's order (submitted in the same second, so either may lead).
  std::string first, second;
  ASSERT_TRUE(eventually([&] {
    int64_t pa = get_job(*admin_, a)["status"].value("queue_position", 0);
    int64_t pb = get_job(*admin_, b)["status"].value("queue_position", 0);
    if (pa == 1 && pb == 2) std::tie(first, second) = std::pair(a, b);
    if (pa == 2 && pb == 1) std::tie(first, second) = std::pair(b, a);
    return !first.empty();
  })) << get_job(*admin_, a).dump() << get_job(*admin_, b).dump();
  // The first waiting job starts when the running one is estimated to end, the second after it.
  Json first_status = get_job(*admin_, first)["status"];
  Json second_status = get_job(*admin_, second)["status"];
  ASSERT_TRUE(first_status.contains("estimated_start")) << first_status.dump();
  Time started = *parse_rfc3339(get_job(*admin_, running)["status"]["started_at"].get<std::string>(), "started_at");
  Time first_start = *parse_rfc3339(first_status["estimated_start"].get<std::string>(), "estimated_start");
  EXPECT_GE(first_start, started + kHour);
  EXPECT_THAT(first_status["waiting_reason"].get<std::string>(), HasSubstr("reserved to start at"));
  // The scheduler reserves for the jobs it can plan a start for; a job behind one gets an estimated
  // start only when it has a reservation of its own, after the first one's end.
  if (second_status.contains("estimated_start")) {
    Time second_start = *parse_rfc3339(second_status["estimated_start"].get<std::string>(), "estimated_start");
    EXPECT_GE(second_start, first_start + 10 * kMinute);
  }
  // The list shows the same; a job that is not pending has neither field.
  Json listed = call(*admin_, "GET", "/v1/jobs?phase=Pending", 200);
  ASSERT_EQ(listed["items"].size(), 2u);
  for (const auto& item : listed["items"]) EXPECT_GT(item["status"].value("queue_position", 0), 0);
  Json bound = get_job(*admin_, running)["status"];
  EXPECT_FALSE(bound.contains("queue_position"));
  EXPECT_FALSE(bound.contains("estimated_start"));
  // Cancelling the first moves the second to the front.
  call(*admin_, "POST", "/v1/jobs/" + first + "/cancel", 200, Json::object());
  EXPECT_TRUE(eventually([&] { return get_job(*admin_, second)["status"].value("queue_position", 0) == 1; }));
  EXPECT_FALSE(get_job(*admin_, first)["status"].contains("queue_position"));
}

TEST_F(JobsTest, CancellingARunningJobAsksTheAgentAndFreesTheGpuWhenItEnds) {
  std::string credential = register_node("gpu-1", "l4", 1);
  auto agent = server_->client(credential);
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "l4"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  Json asked = call(*admin_, "POST", "/v1/jobs/" + id + "/cancel", 200, Json::object());
  EXPECT_EQ(asked["status"]["phase"], "Running");
  EXPECT_EQ(asked["status"]["cancel_requested"], true);
  std::string next = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "l4"))["metadata"]["name"];
  call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Failed"}, {"signal", 15}});
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Cancelled");
  // The GPU it held goes to the next job.
  EXPECT_TRUE(wait_for_phase(*admin_, next, "Scheduled"));
}

TEST_F(JobsTest, LogsAreStoredOnceAndFollowedFromASequenceNumber) {
  std::string credential = register_node("gpu-1", "h100", 8);
  auto agent = server_->client(credential);
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-25"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  Json lines = {{"lines", {{{"seq", 1}, {"stream", "stdout"}, {"text", "epoch 1"}},
                           {{"seq", 2}, {"stream", "stderr"}, {"text", "warning"}}}}};
  EXPECT_EQ(call(*agent, "POST", "/v1/jobs/" + id + "/logs", 200, lines)["last_seq"], 2);
  // Resent after a reconnect: nothing shown twice.
  Json again = {{"lines", {{{"seq", 2}, {"stream", "stderr"}, {"text", "warning"}}, {{"seq", 3}, {"text", "epoch 2"}}}}};
  EXPECT_EQ(call(*agent, "POST", "/v1/jobs/" + id + "/logs", 200, again)["last_seq"], 3);
  auto r = admin_->request("GET", "/v1/jobs/" + id + "/logs?from_seq=2");
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(std::count(r->body.begin(), r->body.end(), '\n'), 2);
  EXPECT_THAT(r->body, HasSubstr("epoch 2"));

  // Follow: the stored lines, then a new one as the agent sends it.
  auto follower = server_->client(server_->admin_token());
  std::string seen;
  std::thread reader([&] {
    (void)follower->stream("GET", "/v1/jobs/" + id + "/logs?follow=1&from_seq=3", [&](std::string_view chunk) {
      seen += chunk;
      return seen.find("epoch 3") == std::string::npos;
    });
  });
  ASSERT_TRUE(eventually([&] { return seen.find("epoch 2") != std::string::npos; }));
  call(*agent, "POST", "/v1/jobs/" + id + "/logs", 200, {{"lines", {{{"seq", 4}, {"text", "epoch 3"}}}}});
  reader.join();
  EXPECT_EQ(seen.find("epoch 1"), std::string::npos);
  EXPECT_NE(seen.find("epoch 3"), std::string::npos);
}

TEST_F(JobsTest, AMigRequestOnAnIdleGpuRepartitionsItInTheNodeRecordWithTheBinding) {
  register_node("gpu-1", "h100", 1);
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100:3g.40gb"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  Json node = call(*admin_, "GET", "/v1/nodes/gpu-1", 200);
  const Json& gpu = node["status"]["gpus"][0];
  EXPECT_EQ(gpu["mig_enabled"], true);
  ASSERT_EQ(gpu["mig_instances"].size(), 1u);
  EXPECT_EQ(gpu["mig_instances"][0]["profile"], "3g.40gb");
  Json job = get_job(*admin_, id);
  EXPECT_EQ(job["status"]["placement"][0]["gpus"][0]["mig_start"], gpu["mig_instances"][0]["start"]);
}

TEST_F(JobsTest, AHeartbeatReadBeforeAMigDecisionDoesNotRevertIt) {
  std::string credential = register_node("gpu-1", "h100", 1);
  auto agent = server_->client(credential);
  // The agent reads its record (no layout decided), then the scheduler decides one.
  int64_t read = call(*agent, "GET", "/v1/nodes/gpu-1", 200)["metadata"]["revision"];
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100:3g.40gb"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  auto layout = [&] { return call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]["gpus"][0]["mig_instances"]; };
  ASSERT_EQ(layout().size(), 1u);

  // Its heartbeat, built from that earlier read, reports the GPU as it was: the decision stays.
  Json report = node_object("gpu-1", "h100", 1);
  report["metadata"]["revision"] = read;
  call(*agent, "PUT", "/v1/nodes/gpu-1/heartbeat", 200, report);
  ASSERT_EQ(layout().size(), 1u) << "a stale report reverted the decided layout";
  EXPECT_EQ(layout()[0]["profile"], "3g.40gb");

  // A report based on the current record is what the GPU has, and is taken as it is.
  report["metadata"]["revision"] = call(*agent, "GET", "/v1/nodes/gpu-1", 200)["metadata"]["revision"];
  call(*agent, "PUT", "/v1/nodes/gpu-1/heartbeat", 200, report);
  EXPECT_EQ(layout().size(), 0u);
}

TEST_F(JobsTest, ASilentNodeBecomesLostAndItsJobsAreRequeued) {
  server_->stop(SIGTERM);
  start_server({"--not-ready-after", "1s", "--lost-after", "2s"});
  std::string credential = register_node("gpu-1", "h100", 8);
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-25"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  // The node's agent watches its jobs; the requeue takes the job off the node: it hears DELETED.
  auto agent = server_->client(credential);
  int64_t revision = call(*agent, "GET", "/v1/jobs", 200)["revision"];
  std::string seen;
  std::thread watcher([&] {
    (void)agent->stream("GET", "/v1/jobs?watch=1&revision=" + std::to_string(revision), [&](std::string_view chunk) {
      seen += chunk;
      return seen.find("\"DELETED\"") == std::string::npos;
    });
  });
  ASSERT_TRUE(eventually([&] { return call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]["phase"] == "Lost"; },
                         std::chrono::seconds(15)));
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Pending"));
  watcher.join();
  EXPECT_NE(seen.find(id), std::string::npos);
  Json job = get_job(*admin_, id);
  EXPECT_THAT(job["status"]["events"].back()["reason"].get<std::string>(), HasSubstr("lost"));
}

TEST_F(JobsTest, AnAgentThatLostAJobsRunRequeuesItAndOnlyWithFailed) {
  std::string credential = register_node("gpu-1", "h100", 8);
  Json body = job_body("default", "h100-25");
  body["spec"]["checkpointable"] = true;
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  auto agent = server_->client(credential);
  call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  auto wrong = agent->request("PUT", "/v1/jobs/" + id + "/status", Json{{"phase", "Running"}, {"requeue", true}}.dump());
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 400) << wrong->body;
  EXPECT_THAT(wrong->body, HasSubstr("requeue comes with Failed"));
  EXPECT_EQ(get_job(*admin_, id)["status"]["phase"], "Running");

  call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200,
       {{"phase", "Failed"}, {"signal", 11}, {"requeue", true}, {"message", "its memory did not all arrive"}});
  // Back in the queue, not Failed: the scheduler binds it again (to the only node there is).
  Json job = get_job(*admin_, id);
  std::string reasons;
  for (const auto& e : job["status"]["events"]) reasons += e["type"].get<std::string>() + ": " + e.value("reason", "") + "\n";
  EXPECT_THAT(reasons, HasSubstr("Preempted: its run on node gpu-1 was lost: its memory did not all arrive; requeued to start again"));
  EXPECT_NE(job["status"]["phase"], "Failed");
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  Json audit = call(*admin_, "GET", "/v1/audit?limit=1000", 200);
  EXPECT_THAT(audit.dump(), HasSubstr("\"requeue\":true"));
}

}  // namespace
}  // namespace cnlab::server::test_support
