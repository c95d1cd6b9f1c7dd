// kill -9 of the server during a storm of concurrent submissions: after a restart every
// acknowledged job is there, and retrying every submission with its idempotency key doubles none.
#include <atomic>
#include <map>
#include <set>
#include <mutex>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

TEST_F(ClusterTest, KillDashNineDuringASubmitStormLosesNoAcknowledgedJobAndDoublesNone) {
  register_node("gpu-1", "h100", 8);
  constexpr int kClients = 16;
  std::mutex mutex;
  std::map<std::string, std::string> acked;  // idempotency key -> job id
  std::atomic<bool> stop{false};
  std::atomic<int> attempted{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = server_->client(server_->admin_token());
      for (int i = 0; !stop; ++i) {
        std::string key = "c" + std::to_string(c) + "-" + std::to_string(i);
        ++attempted;
        auto r = client->request("POST", "/v1/jobs", job_body("default", "h100-1").dump(), {{"Idempotency-Key", key}});
        if (!r || (r->status != 201 && r->status != 200)) return;  // the server died under us
        std::lock_guard lock(mutex);
        acked[key] = Json::parse(r->body)["metadata"]["name"];
      }
    });
  }
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return acked.size() >= 200;
  }));
  server_->stop(SIGKILL);
  stop = true;
  for (auto& t : clients) t.join();

  start_server({});
  std::set<std::string> stored;
  Json listed = call(*admin_, "GET", "/v1/jobs", 200);
  for (const auto& j : listed["items"]) stored.insert(j["metadata"]["name"].get<std::string>());
  for (const auto& [key, id] : acked) EXPECT_TRUE(stored.count(id)) << "acknowledged job " << id << " lost";

  // Retry every submission that was attempted (per client: the acknowledged ones and the one in
  // flight when the server died): acknowledged ones come back as the same job, and afterwards there
  // is exactly one job per key.
  size_t retried = 0;
  for (int c = 0; c < kClients; ++c) {
    for (int i = 0;; ++i) {
      std::string key = "c" + std::to_string(c) + "-" + std::to_string(i);
      bool was_acked = acked.count(key) > 0;
      if (!was_acked && i > 0 && !acked.count("c" + std::to_string(c) + "-" + std::to_string(i - 1))) break;
      ++retried;
      auto r = admin_->request("POST", "/v1/jobs", job_body("default", "h100-1").dump(), {{"Idempotency-Key", key}});
      ASSERT_TRUE(r->status == 200 || r->status == 201) << r->body;
      if (was_acked) {
        EXPECT_EQ(r->status, 200);
        EXPECT_EQ(Json::parse(r->body)["metadata"]["name"], acked[key]);
      }
    }
  }
  Json after = call(*admin_, "GET", "/v1/jobs", 200);
  EXPECT_EQ(after["items"].size(), retried);
  EXPECT_GE(static_cast<size_t>(attempted.load()), retried);
  auto audit = run_cnlab({"audit", "verify", "--server", server_->url(), "--ca", server_->ca(), "--token",
                          server_->data_dir() + "/admin.token"});
  EXPECT_EQ(audit.first, 0) << audit.second;
}

}  // namespace
}  // namespace cnlab::server::test_support
