// What the server does for agents that stream migrating jobs to each other: it signs each node's
// certificate signing request for the name the node's credential is bound to (and nobody else's),
// and binds a migrating job to its target only when the source reports the dump handed over.
#include <gmock/gmock.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "agent/migration_progress.h"
#include "fixtures.h"
#include "net/tls_files.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;

class AgentToAgentTest : public ClusterTest {
 protected:
  Json ask_certificate(net::Client& client, const std::string& node, int status, const std::string& csr) {
    return call(client, "POST", "/v1/nodes/" + node + "/certificate", status, {{"csr", csr}});
  }
  std::string csr(const std::string& name) {
    auto made = net::create_key_and_request(name);
    EXPECT_TRUE(made) << made.error().to_string();
    return made ? made->request_pem : "";
  }
};

TEST_F(AgentToAgentTest, ANodeGetsACertificateForItsOwnNameFromTheClustersCa) {
  auto node = server_->client(register_node("gpu-1", "h100", 1));
  Json issued = ask_certificate(*node, "gpu-1", 201, csr("someone-else"));
  auto info = net::read_cert_info(issued["certificate"]);
  ASSERT_TRUE(info) << issued.dump();
  EXPECT_EQ(info->dns_names, std::vector<std::string>{"gpu-1.node.cnlab"}) << "the credential names it, not the request";
  std::ifstream ca(server_->ca());
  EXPECT_EQ(issued["ca"], std::string(std::istreambuf_iterator<char>(ca), std::istreambuf_iterator<char>()));
  EXPECT_FALSE(issued["expires_at"].get<std::string>().empty());
  bool audited = false;
  const Json log = call(*admin_, "GET", "/v1/audit?limit=1000", 200);
  for (const auto& item : log["items"]) {
    audited = audited || (item["record"]["action"] == "nodes.certificate" && item["record"]["target"] == "gpu-1");
  }
  EXPECT_TRUE(audited);
  auto info_days = static_cast<double>(info->not_after - info->not_before) / 86400;
  EXPECT_LT(info_days, 2.1) << "short-lived: a revoked node loses it within two days";
}

TEST_F(AgentToAgentTest, ANodeWhoseCredentialWasRevokedGetsNoNewCertificate) {
  auto node = server_->client(register_node("gpu-1", "h100", 1));
  ask_certificate(*node, "gpu-1", 201, csr("gpu-1"));
  const Json tokens = call(*admin_, "GET", "/v1/tokens", 200);
  std::string credential;
  for (const auto& token : tokens["items"]) {
    if (token["spec"]["user"] == "node:gpu-1") credential = token["metadata"]["name"];
  }
  ASSERT_FALSE(credential.empty()) << tokens.dump();
  call(*admin_, "POST", "/v1/tokens/" + credential + "/revoke", 200);
  ask_certificate(*node, "gpu-1", 401, csr("gpu-1"));
}

TEST_F(AgentToAgentTest, NoOneGetsACertificateForAnotherNodesName) {
  auto node = server_->client(register_node("gpu-1", "h100", 1));
  register_node("gpu-2", "h100", 1);
  EXPECT_EQ(ask_certificate(*node, "gpu-2", 403, csr("gpu-2"))["error"]["code"], "permission_denied");
  EXPECT_EQ(ask_certificate(*admin_, "gpu-2", 403, csr("gpu-2"))["error"]["code"], "permission_denied");
  auto anonymous = server_->client("");
  ask_certificate(*anonymous, "gpu-2", 401, csr("gpu-2"));
  Json bad = ask_certificate(*node, "gpu-1", 400, "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n");
  EXPECT_EQ(bad["error"]["field"], "csr") << bad.dump();
}

TEST_F(AgentToAgentTest, AMigratingJobIsBoundToItsTargetOnlyOnceTheSourceHandsItsDumpOver) {
  auto source = server_->client(register_peer("gpu-1"));
  auto bystander = server_->client(register_peer("gpu-3", 500));  // too small for the job's 1000 milli-CPU
  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["checkpointable"] = true;
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  const std::string from = get_job(*admin_, id)["status"]["placement"][0]["node"];
  ASSERT_EQ(from, "gpu-1");
  auto target = server_->client(register_peer("gpu-2"));
  auto agent = std::move(source);
  const std::string to = "gpu-2";
  call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  const std::string digest = "sha256:" + std::string(64, 'a');
  Json early = call(*agent, "PUT", "/v1/jobs/" + id + "/status", 409,
                    {{"phase", "Running"}, {"migration_handed_over", {{"dump_digest", digest}}}});
  EXPECT_THAT(early.dump(), HasSubstr("no migration of the job")) << "no migration was asked for";

  call(*target, "GET", "/v1/jobs/" + id, 404);
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", to}});
  // The target sees the job moving to it (its peer endpoint asks before it takes the dump); no
  // other node does.
  EXPECT_EQ(call(*target, "GET", "/v1/jobs/" + id, 200)["status"]["migration"]["to"], to);
  call(*bystander, "GET", "/v1/jobs/" + id, 404);
  call(*target, "GET", "/v1/jobs/" + id + "/checkpoint", 404);
  Json bad = call(*agent, "PUT", "/v1/jobs/" + id + "/status", 400,
                  {{"phase", "Running"}, {"migration_handed_over", {{"dump_digest", "sha256:../x"}}}});
  EXPECT_EQ(bad["error"]["field"], "migration_handed_over.dump_digest") << bad.dump();
  EXPECT_EQ(get_job(*admin_, id)["status"]["placement"][0]["node"], from);

  call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200,
       {{"phase", "Running"},
        {"migration_handed_over", {{"dump_digest", digest}, {"frozen_at_ms", 1}, {"pages_from", "127.0.0.1:4000"}}}});
  Json moving = get_job(*admin_, id);
  EXPECT_EQ(moving["status"]["placement"][0]["node"], to);
  EXPECT_EQ(moving["status"]["migration"]["from"], from);
  EXPECT_EQ(moving["status"]["migration"]["dump_digest"], digest);
  EXPECT_FALSE(moving["status"].contains("checkpoint")) << "the dump went to the target, not to the server";
}

class MigrationProgressTest : public AgentToAgentTest {
 protected:
  void SetUp() override { start_server({"--migration-timeout", "2s"}); }

  // Two nodes and a checkpointable job bound to one of them (from_): node_1_ and node_2_.
  void submit_on_one_of_two() {
    tokens_["gpu-1"] = register_peer("gpu-1");
    tokens_["gpu-2"] = register_peer("gpu-2");
    node_1_ = server_->client(tokens_["gpu-1"]);
    node_2_ = server_->client(tokens_["gpu-2"]);
    Json body = job_body("default", "none", {"sleep", "100"});
    body["spec"]["checkpointable"] = true;
    id_ = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    ASSERT_TRUE(wait_for_phase(*admin_, id_, "Scheduled"));
    from_ = get_job(*admin_, id_)["status"]["placement"][0]["node"];
  }

  std::unique_ptr<net::Client> node_1_, node_2_;
  std::map<std::string, std::string> tokens_;  // each node's token
  std::string id_, from_;
};

TEST_F(MigrationProgressTest, ASourceThatKeepsSayingItIsAtItOutlastsTheTimeoutAndOneThatFallsSilentDoesNot) {
  ASSERT_NO_FATAL_FAILURE(submit_on_one_of_two());
  const std::string id = id_, from = from_;
  auto& node_1 = node_1_;
  auto& node_2 = node_2_;
  net::Client& source = from == "gpu-1" ? *node_1 : *node_2;
  net::Client& other = from == "gpu-1" ? *node_2 : *node_1;
  const std::string to = from == "gpu-1" ? "gpu-2" : "gpu-1";
  call(source, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  Json early = call(source, "PUT", "/v1/jobs/" + id + "/status", 409, {{"phase", "Running"}, {"migration_progress", "dumping"}});
  EXPECT_THAT(early.dump(), HasSubstr("no migration of the job")) << "no migration was asked for";

  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", to}});
  call(other, "PUT", "/v1/jobs/" + id + "/status", 404, {{"phase", "Running"}, {"migration_progress", "dumping"}});
  Json too_long = call(source, "PUT", "/v1/jobs/" + id + "/status", 400,
                       {{"phase", "Running"}, {"migration_progress", std::string(201, 'x')}});
  EXPECT_EQ(too_long["error"]["field"], "migration_progress") << too_long.dump();

  // Twice the timeout, with a word every 400 ms: the migration stays under way.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < until) {
    call(source, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}, {"migration_progress", "sending 900 MiB"}});
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  Json moving = get_job(*admin_, id);
  ASSERT_TRUE(moving["status"].contains("migration")) << moving["status"]["events"].dump();
  EXPECT_EQ(moving["status"]["migration"]["progress"], "sending 900 MiB");
  EXPECT_TRUE(moving["status"]["migration"]["progress_at"].is_string());

  // Silent from now on: given up within the timeout (and the watch's second), running on the source.
  ASSERT_TRUE(eventually([&] { return !get_job(*admin_, id)["status"].contains("migration"); }, std::chrono::seconds(10)));
  Json given_up = get_job(*admin_, id);
  EXPECT_EQ(given_up["status"]["placement"][0]["node"], from);
  EXPECT_EQ(given_up["status"]["phase"], "Running");
  EXPECT_THAT(given_up["status"]["events"].back()["reason"].get<std::string>(),
              HasSubstr("said nothing of its dump for 2s (last: sending 900 MiB)"));
}

TEST_F(MigrationProgressTest, ATargetThatKeepsSayingItIsRestoringOutlastsTheTimeoutAndOneThatFallsSilentDoesNot) {
  ASSERT_NO_FATAL_FAILURE(submit_on_one_of_two());
  const std::string id = id_, from = from_;
  auto& node_1 = node_1_;
  auto& node_2 = node_2_;
  net::Client& source = from == "gpu-1" ? *node_1 : *node_2;
  net::Client& target = from == "gpu-1" ? *node_2 : *node_1;
  const std::string to = from == "gpu-1" ? "gpu-2" : "gpu-1";
  call(source, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", to}});
  // Not the target's word before the hand-over binds the job there.
  call(target, "PUT", "/v1/jobs/" + id + "/status", 404, {{"phase", "Running"}, {"migration_progress", "restoring"}});
  call(source, "PUT", "/v1/jobs/" + id + "/status", 200,
       {{"phase", "Running"}, {"migration_handed_over", {{"dump_digest", "sha256:" + std::string(64, 'a')}, {"frozen_at_ms", 1}}}});
  // The source has handed it over: the job is not its own any more.
  call(source, "PUT", "/v1/jobs/" + id + "/status", 409, {{"phase", "Running"}, {"migration_progress", "sending"}});

  // Twice the timeout, the target restoring with a word every 400 ms: the migration stays under way.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < until) {
    call(target, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}, {"migration_progress", "restoring on " + to}});
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  Json restoring = get_job(*admin_, id);
  ASSERT_TRUE(restoring["status"].contains("migration")) << restoring["status"]["events"].dump();
  EXPECT_EQ(restoring["status"]["phase"], "Scheduled") << "a word of progress is not the report that it runs";
  EXPECT_EQ(restoring["status"]["migration"]["progress"], "restoring on " + to);

  // Silent from now on: given up, and the job carries on on the source.
  ASSERT_TRUE(eventually([&] { return !get_job(*admin_, id)["status"].contains("migration"); }, std::chrono::seconds(10)));
  EXPECT_EQ(metric("cnlab_migrations_total{outcome=\"given_up\"}"), 1);
  Json given_up = get_job(*admin_, id);
  EXPECT_EQ(given_up["status"]["placement"][0]["node"], from);
  EXPECT_THAT(given_up["status"]["events"].back()["reason"].get<std::string>(),
              HasSubstr("the target " + to + " did not restore it within 2s"));
}

// The agent's reporter (agent::MigrationProgress) against the real server: it says when the server
// refuses its word because the move is no longer under way, which makes a target give its restore
// up (docs/checkpoint.md).
TEST_F(MigrationProgressTest, TheAgentsReporterHearsWhenTheServerNoLongerWaitsForTheMove) {
  ASSERT_NO_FATAL_FAILURE(submit_on_one_of_two());
  const std::string id = id_, from = from_;
  const std::string to = from == "gpu-1" ? "gpu-2" : "gpu-1";
  net::Client& source = from == "gpu-1" ? *node_1_ : *node_2_;
  call(source, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", to}});
  call(source, "PUT", "/v1/jobs/" + id + "/status", 200,
       {{"phase", "Running"}, {"migration_handed_over", {{"dump_digest", "sha256:" + std::string(64, 'a')}, {"frozen_at_ms", 1}}}});
  const agent::ServerAddress server{server_->url(), server_->ca()};
  {
    // Restoring, and saying so more often than the 2 s timeout: every word is taken.
    agent::MigrationProgress restoring(server, tokens_[to], id, std::chrono::milliseconds(300));
    restoring.stage("restoring on " + to);
    ASSERT_TRUE(eventually([&] { return get_job(*admin_, id)["status"]["migration"].value("progress", "") == "restoring on " + to; },
                           std::chrono::seconds(5)));
    std::this_thread::sleep_for(std::chrono::seconds(1));
    EXPECT_FALSE(restoring.refused());
  }
  // Silent past the timeout: the move is rolled back, and the next word is refused.
  ASSERT_TRUE(eventually([&] { return !get_job(*admin_, id)["status"].contains("migration"); }, std::chrono::seconds(10)));
  EXPECT_EQ(get_job(*admin_, id)["status"]["placement"][0]["node"], from);
  agent::MigrationProgress late(server, tokens_[to], id, std::chrono::milliseconds(100));
  EXPECT_TRUE(eventually([&] { return late.refused(); }, std::chrono::seconds(5)));
  // The source's word, when no move is asked for, is refused the same way.
  agent::MigrationProgress stray(server, tokens_[from], id, std::chrono::milliseconds(100));
  EXPECT_TRUE(eventually([&] { return stray.refused(); }, std::chrono::seconds(5)));
}

// cnlab_migrations_total{outcome}, cnlab_migration_pause_seconds{mode} and cnlab_jobs_migrating on
// the server's /metrics, through a move that ends migrated and one its source gives up.
TEST_F(MigrationProgressTest, MovesAreCountedByOutcomeWithTheirPause) {
  ASSERT_NO_FATAL_FAILURE(submit_on_one_of_two());
  const std::string id = id_, from = from_;
  const std::string to = from == "gpu-1" ? "gpu-2" : "gpu-1";
  net::Client& source = from == "gpu-1" ? *node_1_ : *node_2_;
  net::Client& target = from == "gpu-1" ? *node_2_ : *node_1_;
  call(source, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  EXPECT_EQ(metric("cnlab_jobs_migrating"), 0);
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", to}});
  EXPECT_EQ(metric("cnlab_jobs_migrating"), 1);
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  call(source, "PUT", "/v1/jobs/" + id + "/status", 200,
       {{"phase", "Running"},
        {"migration_handed_over", {{"dump_digest", "sha256:" + std::string(64, 'a')}, {"frozen_at_ms", now_ms - 1500}}}});
  call(target, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  EXPECT_EQ(metric("cnlab_migrations_total{outcome=\"migrated\"}"), 1);
  EXPECT_EQ(metric("cnlab_migration_pause_seconds_count{mode=\"stop-and-copy\"}"), 1);
  EXPECT_GE(metric("cnlab_migration_pause_seconds_sum{mode=\"stop-and-copy\"}"), 1.5) << "frozen 1.5 s before";
  EXPECT_EQ(metric("cnlab_migration_pause_seconds_bucket{mode=\"stop-and-copy\",le=\"1\"}"), 0);
  EXPECT_EQ(metric("cnlab_jobs_migrating"), 0);

  // Back again, and given up by its source (now `to`): counted as such.
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", from}});
  call(target, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}, {"migration_failed", "the dump failed"}});
  EXPECT_EQ(metric("cnlab_migrations_total{outcome=\"given_up\"}"), 1);
  EXPECT_EQ(metric("cnlab_migrations_total{outcome=\"migrated\"}"), 1);
  EXPECT_EQ(metric("cnlab_jobs_migrating"), 0);
}

TEST_F(MigrationProgressTest, AJobHoldingAGpuIsBoundToItsTargetGpuOnTheHandOverAndToItsOwnAgainWhenTheMoveIsGivenUp) {
  // Nodes of two H100s whose agents take migrating jobs and checkpoint GPU state.
  auto gpu_peer = [&](const std::string& name) {
    Json node = node_object(name, "h100", 2, 64000, 512 * 1024, "127.0.0.1:7443");
    node["status"]["gpu_checkpoint"] = true;
    return server_->client(register_node(name, "h100", 2, node));
  };
  auto source = gpu_peer("gpu-1");
  Json body = job_body("default", "h100", {"sleep", "100"});
  body["spec"]["checkpointable"] = true;
  const std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  call(*source, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  const Json own = get_job(*admin_, id)["status"]["placement"][0];
  gpu_peer("gpu-2");
  const Json chosen = call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", "gpu-2"}})["status"]["migration"]["gpus"];
  ASSERT_EQ(chosen.size(), 1u);
  call(*source, "PUT", "/v1/jobs/" + id + "/status", 200,
       {{"phase", "Running"}, {"migration_handed_over", {{"dump_digest", "sha256:" + std::string(64, 'a')}, {"frozen_at_ms", 1}}}});
  const Json moving = get_job(*admin_, id)["status"];
  EXPECT_EQ(moving["placement"][0]["node"], "gpu-2");
  EXPECT_EQ(moving["placement"][0]["gpus"], chosen) << "bound to the GPU chosen for it there";
  EXPECT_EQ(moving["migration"]["from_gpus"], own["gpus"]);
  // The target never reports it Running: given up, and the job is the source's again, on its GPU.
  ASSERT_TRUE(eventually([&] { return !get_job(*admin_, id)["status"].contains("migration"); }, std::chrono::seconds(10)));
  const Json given_up = get_job(*admin_, id)["status"];
  EXPECT_EQ(given_up["phase"], "Running");
  EXPECT_EQ(given_up["placement"][0], own) << given_up.dump();
}

}  // namespace
}  // namespace cnlab::server::test_support
