// Metrics: the Prometheus text format, a real Prometheus scraping a real server and answering a
// query for one of its series, and a Grafana dashboard that names only exported metrics.
#include <gmock/gmock.h>

#include <netinet/in.h>
#include <regex>
#include <set>
#include <sys/socket.h>

#include "server/metrics.h"
#include "server_process.h"

namespace cnlab::server {
namespace {

using test_support::call;
using test_support::eventually;
using test_support::ServerProcess;
using test_support::slurp;
using test_support::TempDir;
using ::testing::HasSubstr;

TEST(Metrics, RendersCountersGaugesAndCumulativeHistogramBuckets) {
  Metrics m;
  m.requests.inc({{"route", "GET /v1/jobs"}, {"code", "200"}});
  m.requests.inc({{"route", "GET /v1/jobs"}, {"code", "200"}});
  m.jobs.set({{"phase", "Pending"}, {"class", "dev"}}, 3);
  m.cycle_seconds.observe({}, 0.003);
  m.cycle_seconds.observe({}, 0.2);
  std::string text = m.render();
  EXPECT_THAT(text, HasSubstr("cnlab_http_requests_total{route=\"GET /v1/jobs\",code=\"200\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("cnlab_jobs{phase=\"Pending\",class=\"dev\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("cnlab_scheduler_cycle_seconds_bucket{le=\"0.0025\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("cnlab_scheduler_cycle_seconds_bucket{le=\"0.005\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("cnlab_scheduler_cycle_seconds_bucket{le=\"+Inf\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("cnlab_scheduler_cycle_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE cnlab_scheduler_cycle_seconds histogram\n"));
}

std::set<std::string> exported_names() {
  Metrics m;
  std::set<std::string> names;
  std::regex type_line("# TYPE (\\S+) ");
  std::string text = m.render();
  for (std::sregex_iterator it(text.begin(), text.end(), type_line), end; it != end; ++it) names.insert((*it)[1]);
  return names;
}

TEST(Metrics, TheGrafanaDashboardNamesOnlyExportedMetrics) {
  std::string dashboard = slurp(std::string(CNLAB_SOURCE_DIR) + "/deploy/grafana/cnlab.json");
  Json json = Json::parse(dashboard, nullptr, false);
  ASSERT_TRUE(json.is_object()) << "deploy/grafana/cnlab.json is not JSON";
  std::set<std::string> exported = exported_names();
  std::vector<std::string> exprs;
  std::function<void(const Json&)> walk = [&](const Json& j) {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k == "expr" && v.is_string()) exprs.push_back(v);
        walk(v);
      }
    } else if (j.is_array()) {
      for (const auto& v : j) walk(v);
    }
  };
  walk(json);
  ASSERT_GE(exprs.size(), 6u);
  std::regex metric("cnlab_[a-z_]+");
  for (const auto& expr : exprs) {
    for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end; it != end; ++it) {
      std::string name = it->str();
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (name.size() > strlen(suffix) && name.ends_with(suffix) && !exported.count(name)) {
          name.resize(name.size() - strlen(suffix));
        }
      }
      EXPECT_TRUE(exported.count(name)) << "dashboard query \"" << expr << "\" names " << it->str()
                                        << ", which the server does not export";
    }
  }
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(Metrics, PrometheusScrapesTheServerAndAnswersAQueryForItsSeries) {
  const char* prometheus = "/usr/bin/prometheus";
  ASSERT_EQ(::access(prometheus, X_OK), 0) << "Debian's prometheus is missing: scripts/install-deps.sh installs it";
  TempDir dir;
  ServerProcess server(dir.path() + "/data");
  auto admin = server.client(server.admin_token());
  call(*admin, "POST", "/v1/projects", 201, {{"metadata", {{"name", "vision"}}}});
  std::string host_port = server.url().substr(server.url().find("://") + 3);
  std::string config = dir.path() + "/prometheus.yml";
  {
    std::ofstream out(config);
    out << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: cnlab\n    scheme: https\n"
        << "    tls_config:\n      ca_file: " << server.ca() << "\n    static_configs:\n      - targets: ['" << host_port
        << "']\n";
  }
  uint16_t port = free_port();
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string log = dir.path() + "/prometheus.log";
    FILE* f = std::fopen(log.c_str(), "w");
    if (f) {
      ::dup2(fileno(f), 1);
      ::dup2(fileno(f), 2);
    }
    std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port);
    std::string storage = "--storage.tsdb.path=" + dir.path() + "/tsdb";
    std::string cfg = "--config.file=" + config;
    ::execl(prometheus, prometheus, cfg.c_str(), storage.c_str(), listen.c_str(), nullptr);
    ::_exit(127);
  }
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{pid};
  std::unique_ptr<net::Client> query;
  Json answer;
  bool found = eventually(
      [&] {
        if (!query) {
          auto connected = net::Client::connect({"http://127.0.0.1:" + std::to_string(port), "", ""});
          if (!connected) return false;
          query = std::move(*connected);
        }
        auto r = query->request("GET", "/api/v1/query?query=cnlab_http_requests_total");
        if (!r || r->status != 200) return false;
        answer = Json::parse(r->body, nullptr, false);
        return answer.is_object() && answer["status"] == "success" && !answer["data"]["result"].empty();
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(found) << "prometheus never returned the series; its log: " << slurp(dir.path() + "/prometheus.log");
  EXPECT_EQ(answer["data"]["result"][0]["metric"]["__name__"], "cnlab_http_requests_total");
}

}  // namespace
}  // namespace cnlab::server
