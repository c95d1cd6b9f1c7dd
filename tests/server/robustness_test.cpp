// Malformed, oversized and random requests: every one gets a 4xx with a JSON error, and the server
// keeps serving and keeps its data.
#include <random>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

TEST_F(ClusterTest, MalformedOversizedAndRandomBodiesNeverCrashTheServer) {
  register_node("gpu-1", "h100", 8);
  std::string kept = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-25"))["metadata"]["name"];
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"POST", "/v1/jobs"},        {"POST", "/v1/projects"},         {"POST", "/v1/users"},
      {"POST", "/v1/rolebindings"}, {"PUT", "/v1/quotas/q"},         {"POST", "/v1/tokens"},
      {"POST", "/v1/join-tokens"}, {"POST", "/v1/nodes"},            {"POST", "/v1/jobs/" + kept + "/cancel"},
      {"GET", "/v1/jobs?limit=-5&labelSelector=%%%"}, {"GET", "/v1/jobs?watch=1&revision=abc"},
      {"GET", "/v1/audit?from=x"}, {"GET", "/v1/../../etc/passwd"},
  };
  std::mt19937 rng(7);
  std::vector<std::string> bodies = {"", "{", "[]", "null", "\"str\"", "{\"metadata\":5}", "{\"spec\":{\"gpu\":1}}",
                                     R"({"spec":{"project":"default","gpu":"h100-25","command":["x"],"cpu_milli":-1}})",
                                     R"({"metadata":{"name":"../../etc"},"spec":{}})",
                                     std::string(1000, '{'), "{\"a\":" + std::string(5000, '[') + "}"};
  for (int i = 0; i < 40; ++i) {
    std::string random(static_cast<size_t>(rng() % 600), '\0');
    for (auto& c : random) c = static_cast<char>(rng() % 256);
    bodies.push_back(random);
  }
  for (const auto& [method, target] : routes) {
    for (const auto& body : bodies) {
      auto r = admin_->request(method, target, body);
      ASSERT_TRUE(r) << method << " " << target << " transport: " << r.error().to_string();
      EXPECT_GE(r->status, 200);
      EXPECT_LT(r->status, 500) << method << " " << target << " body " << body.substr(0, 40) << " -> " << r->body;
    }
  }
  // Over the body limit.
  auto big = admin_->request("POST", "/v1/jobs", std::string(2 << 20, 'x'));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  // Still serving, data intact.
  auto fresh = server_->client(server_->admin_token());
  EXPECT_EQ(call(*fresh, "GET", "/v1/jobs/" + kept, 200)["metadata"]["name"], kept);
  EXPECT_TRUE(server_->running());
}

}  // namespace
}  // namespace cnlab::server::test_support
