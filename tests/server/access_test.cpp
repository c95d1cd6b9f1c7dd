// Access: every token attack the API must refuse, and RBAC across projects (404 for what a caller
// may not see, 403 for what it sees but may not do).
#include <gmock/gmock.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "auth/auth.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;

Time now() { return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()); }

class AccessTest : public ClusterTest {
 protected:
  int status_with(const std::string& token, const std::string& target = "/v1/projects") {
    auto client = server_->client(token);
    return client->request("GET", target)->status;
  }
  auth::VerifierOptions server_signing() {
    auth::VerifierOptions options;
    options.hs256_secret = slurp(dir_.path() + "/signing.key");
    return options;
  }
};

TEST_F(AccessTest, MissingMalformedAndForgedTokensGet401) {
  EXPECT_EQ(status_with(""), 401);
  EXPECT_EQ(status_with("not-a-jwt"), 401);
  auth::VerifierOptions other;
  other.hs256_secret = "someone else's key";
  EXPECT_EQ(status_with(auth::mint_hs256({"admin", "default", "x", kHour}, other, now())), 401);
  // alg none with the admin's claims.
  std::string header = auth::base64url_encode(R"({"alg":"none","typ":"JWT"})");
  Json claims = {{"iss", "cnlab"}, {"aud", "cnlab"}, {"sub", "admin"}, {"exp", now().time_since_epoch().count() + 3600}};
  EXPECT_EQ(status_with(header + "." + auth::base64url_encode(claims.dump()) + "."), 401);
  EXPECT_EQ(status_with(std::string(10000, 'a')), 401);  // over the verifier's 8 KiB, under the header limit
}

TEST_F(AccessTest, ExpiredTokenAndUnknownTokenIdGet401EvenWithTheServersKey) {
  // Signed with the real key, but expired: refused.
  std::string expired = auth::mint_hs256({"admin", "default", "whatever", Duration{60}}, server_signing(), now() - kHour);
  auto client = server_->client(expired);
  auto response = client->request("GET", "/v1/projects");
  EXPECT_EQ(response->status, 401);
  EXPECT_THAT(response->body, HasSubstr("expired"));
  // Signed with the real key and valid, but never issued (no token record): refused.
  std::string unissued = auth::mint_hs256({"admin", "default", "never-issued", kHour}, server_signing(), now());
  EXPECT_EQ(status_with(unissued), 401);
}

TEST_F(AccessTest, RevokedTokenStopsWorking) {
  create_project("vision");
  Json made = call(*admin_, "POST", "/v1/tokens", 201, {{"user", "alice"}, {"project", "vision"}, {"role", "member"}});
  std::string token = made["token"];
  EXPECT_EQ(status_with(token), 200);
  std::string id = made["record"]["metadata"]["name"];
  call(*admin_, "POST", "/v1/tokens/" + id + "/revoke", 200, Json::object());
  EXPECT_EQ(status_with(token), 401);
}

TEST_F(AccessTest, AnotherProjectsJobIsNotFoundNotForbidden) {
  register_node("gpu-1", "h100", 8);
  create_project("vision");
  create_project("nlp");
  auto alice = server_->client(token_for("alice", "vision", "member"));
  auto bob = server_->client(token_for("bob", "nlp", "member"));
  Json job = call(*alice, "POST", "/v1/jobs", 201, job_body("vision", "h100-25"));
  std::string id = job["metadata"]["name"];
  auto seen = bob->request("GET", "/v1/jobs/" + id);
  EXPECT_EQ(seen->status, 404);
  EXPECT_EQ(bob->request("POST", "/v1/jobs/" + id + "/cancel", "{}")->status, 404);
  EXPECT_EQ(bob->request("GET", "/v1/jobs/" + id + "/logs")->status, 404);
  // Bob's listing does not show it either.
  Json listed = call(*bob, "GET", "/v1/jobs", 200);
  EXPECT_TRUE(listed["items"].empty());
  // And bob cannot submit into vision.
  EXPECT_EQ(bob->request("POST", "/v1/jobs", job_body("vision", "h100-25").dump())->status, 403);
}

TEST_F(AccessTest, ViewersReadButDoNotSubmitMembersCancelOnlyTheirOwn) {
  register_node("gpu-1", "h100", 8);
  create_project("vision");
  auto alice = server_->client(token_for("alice", "vision", "member"));
  auto carol = server_->client(token_for("carol", "vision", "member"));
  auto victor = server_->client(token_for("victor", "vision", "viewer"));
  auto petra = server_->client(token_for("petra", "vision", "project-admin"));
  std::string id = call(*alice, "POST", "/v1/jobs", 201, job_body("vision", "h100-25"))["metadata"]["name"];
  EXPECT_EQ(victor->request("GET", "/v1/jobs/" + id)->status, 200);
  EXPECT_EQ(victor->request("POST", "/v1/jobs", job_body("vision", "h100-25").dump())->status, 403);
  EXPECT_EQ(carol->request("POST", "/v1/jobs/" + id + "/cancel", "{}")->status, 403);
  EXPECT_EQ(petra->request("POST", "/v1/jobs/" + id + "/cancel", "{}")->status, 200);
}

TEST_F(AccessTest, PagingThroughJobsNeverEndsOnAnotherProjectsJob) {
  register_node("gpu-1", "h100", 8);
  create_project("vision");
  create_project("nlp");
  auto bob = server_->client(token_for("bob", "nlp", "member"));
  for (int i = 0; i < 3; ++i) call(*admin_, "POST", "/v1/jobs", 201, job_body("vision", "h100-1"));
  for (int i = 0; i < 3; ++i) call(*bob, "POST", "/v1/jobs", 201, job_body("nlp", "h100-1"));
  // One project: paged inside it; every page and token speak only of nlp's jobs.
  std::string target = "/v1/jobs?limit=1";
  size_t pages = 0;
  while (true) {
    Json page = call(*bob, "GET", target, 200);
    for (const auto& job : page["items"]) EXPECT_EQ(job["spec"]["project"], "nlp");
    ++pages;
    if (!page.contains("continue")) break;
    target = "/v1/jobs?limit=1&continue=" + page["continue"].get<std::string>();
  }
  EXPECT_GE(pages, 3u);
  // Two projects: paging needs one named.
  call(*admin_, "POST", "/v1/rolebindings", 201, {{"spec", {{"user", "bob"}, {"project", "default"}, {"role", "viewer"}}}});
  EXPECT_EQ(bob->request("GET", "/v1/jobs?limit=1")->status, 400);
  EXPECT_EQ(bob->request("GET", "/v1/jobs?limit=1&project=nlp")->status, 200);
}

TEST_F(AccessTest, ATokenCannotMintItselfALongerLife) {
  create_project("vision");
  auto alice = server_->client(token_for("alice", "vision", "member"));  // valid for 1h
  EXPECT_EQ(alice->request("POST", "/v1/tokens", R"({"user":"alice","ttl":"30d"})")->status, 400);
  EXPECT_EQ(alice->request("POST", "/v1/tokens", R"({"user":"alice","ttl":"10m"})")->status, 201);
  EXPECT_EQ(alice->request("POST", "/v1/tokens", R"({"user":"bob","ttl":"10m"})")->status, 403);
}

TEST_F(AccessTest, OnlyAdminsCreateProjectsJoinTokensAndQuotas) {
  create_project("vision");
  auto petra = server_->client(token_for("petra", "vision", "project-admin"));
  EXPECT_EQ(petra->request("POST", "/v1/projects", R"({"metadata":{"name":"mine"}})")->status, 403);
  EXPECT_EQ(petra->request("POST", "/v1/join-tokens", "{}")->status, 403);
  EXPECT_EQ(petra->request("PUT", "/v1/quotas/q", R"({"spec":{"project":"vision","gpus":100}})")->status, 403);
  EXPECT_EQ(petra->request("POST", "/v1/rolebindings", R"({"spec":{"user":"petra","project":"*","role":"admin"}})")->status, 403);
}

TEST_F(AccessTest, NodeCredentialsComeOnlyFromValidJoinTokens) {
  auto anonymous = server_->client("");
  Json node = node_object("gpu-9", "l4", 2);
  EXPECT_EQ(anonymous->request("POST", "/v1/nodes", Json{{"join_token", "nope.nope"}, {"node", node}}.dump())->status, 401);
  Json join = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}, {"max_uses", 1}});
  std::string token = join["token"];
  std::string wrong_secret = token.substr(0, token.find('.') + 1) + std::string(64, '0');
  EXPECT_EQ(anonymous->request("POST", "/v1/nodes", Json{{"join_token", wrong_secret}, {"node", node}}.dump())->status, 401);
  EXPECT_EQ(anonymous->request("POST", "/v1/nodes", Json{{"join_token", token}, {"node", node}}.dump())->status, 201);
  // Used up.
  EXPECT_EQ(anonymous->request("POST", "/v1/nodes", Json{{"join_token", token}, {"node", node}}.dump())->status, 401);
  // Revoked.
  Json second = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}});
  call(*admin_, "POST", "/v1/join-tokens/" + second["record"]["metadata"]["name"].get<std::string>() + "/revoke", 200, Json::object());
  EXPECT_EQ(anonymous->request("POST", "/v1/nodes", Json{{"join_token", second["token"]}, {"node", node}}.dump())->status, 401);
}

TEST_F(AccessTest, NodesJoiningAtOnceWithOneTokenEachJoinAndEachUseIsCounted) {
  // A fleet started with one token: every agent registers at the same moment. Each registration
  // counts a use of the token, so all but one find it changed when they commit; they are not refused
  // for that, and a token's limit still holds exactly.
  auto join_at_once = [&](const std::string& token, const std::string& prefix, int nodes) {
    std::vector<int> statuses(static_cast<size_t>(nodes));
    std::vector<std::thread> joiners;
    std::atomic<bool> go{false};
    for (int i = 0; i < nodes; ++i) {
      joiners.emplace_back([&, i, client = server_->client("")]() mutable {
        const Json body{{"join_token", token}, {"node", node_object(prefix + std::to_string(i), "l4", 1)}};
        while (!go) std::this_thread::yield();
        auto response = client->request("POST", "/v1/nodes", body.dump());
        statuses[static_cast<size_t>(i)] = response ? response->status : -1;
      });
    }
    go = true;
    for (auto& joiner : joiners) joiner.join();
    return statuses;
  };
  auto count = [](const std::vector<int>& statuses, int status) {
    return std::count(statuses.begin(), statuses.end(), status);
  };
  Json fleet = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}});
  std::vector<int> joined = join_at_once(fleet["token"], "fleet-", 8);
  EXPECT_EQ(count(joined, 201), 8) << ::testing::PrintToString(joined);

  Json limited = call(*admin_, "POST", "/v1/join-tokens", 201, {{"ttl", "1h"}, {"max_uses", 3}});
  joined = join_at_once(limited["token"], "few-", 8);
  EXPECT_EQ(count(joined, 201), 3) << ::testing::PrintToString(joined);
  EXPECT_EQ(count(joined, 401), 5) << ::testing::PrintToString(joined);
  EXPECT_EQ(call(*admin_, "GET", "/v1/nodes", 200)["items"].size(), 11u);
}

TEST_F(AccessTest, ANodeRegisteringAgainKeepsTheOperatorsCordonOrDrain) {
  // An agent reinstalled registers its node again with a new token.
  auto phase_after_joining_again = [&] {
    register_node("gpu-1", "h100", 1);
    return call(*admin_, "GET", "/v1/nodes/gpu-1", 200);
  };
  EXPECT_EQ(phase_after_joining_again()["status"]["phase"], "Ready");
  call(*admin_, "POST", "/v1/nodes/gpu-1/cordon", 200);
  EXPECT_EQ(phase_after_joining_again()["status"]["phase"], "Cordoned");
  call(*admin_, "POST", "/v1/nodes/gpu-1/drain", 200, {{"requeue", true}});
  Json draining = phase_after_joining_again();
  EXPECT_EQ(draining["status"]["phase"], "Draining") << draining.dump();
  EXPECT_EQ(draining["spec"].value("drain_requeues", false), true) << draining.dump();
  call(*admin_, "POST", "/v1/nodes/gpu-1/uncordon", 200);
  Json ready = phase_after_joining_again();
  EXPECT_EQ(ready["status"]["phase"], "Ready") << ready.dump();
  EXPECT_FALSE(ready["spec"].contains("drain_requeues")) << ready.dump();
}

TEST_F(AccessTest, ANodeCredentialActsOnlyForItsOwnNode) {
  std::string credential = register_node("gpu-1", "h100", 8);
  register_node("gpu-2", "h100", 8);
  auto agent = server_->client(credential);
  EXPECT_EQ(agent->request("PUT", "/v1/nodes/gpu-1/heartbeat", node_object("gpu-1", "h100", 8).dump())->status, 200);
  EXPECT_EQ(agent->request("PUT", "/v1/nodes/gpu-2/heartbeat", node_object("gpu-2", "h100", 8).dump())->status, 403);
  EXPECT_EQ(agent->request("POST", "/v1/jobs", job_body("default", "h100-25").dump())->status, 403);
  EXPECT_EQ(agent->request("POST", "/v1/projects", R"({"metadata":{"name":"x"}})")->status, 403);
}

}  // namespace
}  // namespace cnlab::server::test_support
