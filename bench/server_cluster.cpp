#include "server_cluster.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "model/model.h"

namespace cnlab::bench {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// Runs `argv` to completion with stdout and stderr appended to `log`; returns its exit status.
int run_to_completion(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    FILE* out = std::fopen(log.c_str(), "a");
    if (out) {
      ::dup2(fileno(out), 1);
      ::dup2(fileno(out), 2);
    }
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TempDir::TempDir(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::pair<pid_t, std::string> spawn_first_line(std::vector<std::string> args, const std::string& log) {
  int out[2];
  if (::pipe(out) != 0) return {-1, "pipe() failed"};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    if (FILE* err = std::fopen(log.c_str(), "a")) ::dup2(fileno(err), 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string line;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(out[0]);
  return {pid, line};
}

Result<std::unique_ptr<ServerProcess>> ServerProcess::start(const std::string& data_dir,
                                                            const std::vector<std::string>& extra) {
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->data_dir_ = data_dir;
  std::string init_log = data_dir + ".init.log";
  if (run_to_completion({CNLAB_BINARY, "server", "init", "--data-dir", data_dir}, init_log) != 0) {
    return Error::internal("cnlab server init --data-dir " + data_dir + " failed: " + slurp(init_log));
  }
  std::filesystem::remove(init_log);
  std::vector<std::string> args = {CNLAB_BINARY, "server", "--data-dir", data_dir, "--listen", "127.0.0.1:0"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto [pid, line] = spawn_first_line(args, data_dir + "/server.log");
  server->pid_ = pid;
  const std::string prefix = "listening on ";
  if (line.rfind(prefix, 0) != 0) {
    server->stop(std::chrono::seconds(1));
    return Error::internal("cnlab server did not start: \"" + line + "\"; its log: " + slurp(data_dir + "/server.log"));
  }
  server->url_ = line.substr(prefix.size());
  server->admin_token_ = slurp(data_dir + "/admin.token");
  return server;
}

ServerProcess::~ServerProcess() { stop(); }

void ServerProcess::stop(std::chrono::seconds grace) {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  auto deadline = Clock::now() + grace;
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "server_bench: the server did not stop within %llds of SIGTERM; killing it\n",
                   static_cast<long long>(grace.count()));
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
}

int64_t ServerProcess::status_field(const char* name) const {
  if (pid_ <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  std::string prefix = std::string(name) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtoll(line.c_str() + prefix.size(), nullptr, 10);
  }
  return -1;
}

int64_t ServerProcess::rss_kib() const { return status_field("VmRSS"); }
int64_t ServerProcess::peak_rss_kib() const { return status_field("VmHWM"); }

double ServerProcess::cpu_seconds() const {
  if (pid_ <= 0) return 0;
  std::string stat = slurp("/proc/" + std::to_string(pid_) + "/stat");
  // Fields after the command's closing parenthesis: state is field 3; utime 14, stime 15.
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

Result<std::unique_ptr<net::Client>> ServerProcess::client(const std::string& token,
                                                           std::chrono::milliseconds timeout) const {
  return net::Client::connect({url_, ca(), token, timeout});
}

Result<Json> call(net::Client& client, const std::string& method, const std::string& target, int status,
                  const Json& body, const std::map<std::string, std::string>& headers) {
  auto response = client.request(method, target, body.is_null() ? "" : body.dump(), headers);
  if (!response) return response.error();
  if (response->status != status) {
    return Error::internal(method + " " + target + ": expected " + std::to_string(status) + ", got " +
                           std::to_string(response->status) + ": " + response->body.substr(0, 400));
  }
  Json json = Json::parse(response->body, nullptr, false);
  return json.is_discarded() ? Json(response->body) : json;
}

Json node_object(const std::string& name, const std::string& gpu_model, int gpus) {
  return model::to_json(model::simulated_node(name, *model::parse_model(gpu_model, "model"), gpus, 256000, 2048 * 1024));
}

Result<std::string> join_token(net::Client& admin) {
  auto made = call(admin, "POST", "/v1/join-tokens", 201, {{"ttl", "2h"}});
  if (!made) return made.error();
  return (*made)["token"].get<std::string>();
}

Result<std::string> register_node(net::Client& anonymous, const std::string& join_token, const Json& node) {
  auto registered = call(anonymous, "POST", "/v1/nodes", 201, {{"join_token", join_token}, {"node", node}});
  if (!registered) return registered.error();
  return (*registered)["token"].get<std::string>();
}

double MetricsText::value(const std::string& series) const {
  size_t at = 0;
  while ((at = text.find(series, at)) != std::string::npos) {
    bool line_start = at == 0 || text[at - 1] == '\n';
    size_t after = at + series.size();
    if (line_start && after < text.size() && text[after] == ' ') return std::strtod(text.c_str() + after + 1, nullptr);
    at = after;
  }
  return 0;
}

Result<MetricsText> scrape(net::Client& admin) {
  auto response = admin.request("GET", "/metrics");
  if (!response) return response.error();
  if (response->status != 200) return Error::internal("GET /metrics: " + std::to_string(response->status));
  return MetricsText{std::move(response->body)};
}

int64_t first_revision(std::string_view line) {
  static constexpr std::string_view kKey = "\"revision\":";
  size_t at = line.find(kKey);
  if (at == std::string_view::npos) return -1;
  int64_t value = 0;
  bool any = false;
  for (size_t i = at + kKey.size(); i < line.size() && line[i] >= '0' && line[i] <= '9'; ++i) {
    value = value * 10 + (line[i] - '0');
    any = true;
  }
  return any ? value : -1;
}

Percentiles percentiles(std::vector<double> values) {
  Percentiles p;
  p.n = values.size();
  if (values.empty()) return p;
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
    return values[std::min(i, values.size() - 1)];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.max = values.back();
  double sum = 0;
  for (double v : values) sum += v;
  p.mean = sum / static_cast<double>(values.size());
  return p;
}

void Threads::spawn(std::function<void()> body) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes_);
  auto* owned = new std::function<void()>(std::move(body));
  pthread_t thread;
  int rc = pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(arg));
        (*f)();
        return nullptr;
      },
      owned);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete owned;
    std::fprintf(stderr, "server_bench: pthread_create failed (%d) with %zu threads running\n", rc, threads_.size());
    std::abort();
  }
  threads_.push_back(thread);
}

void Threads::join() {
  for (auto t : threads_) pthread_join(static_cast<pthread_t>(t), nullptr);
  threads_.clear();
}

double own_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

MachineCpu machine_cpu() {
  MachineCpu m;
  std::ifstream in("/proc/stat");
  std::string cpu;
  double v[10] = {};
  in >> cpu;
  for (double& x : v) in >> x;
  double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  // user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
  m.busy = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / tick;
  m.irq = (v[5] + v[6]) / tick;
  return m;
}

double load_average() {
  double load = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

}  // namespace cnlab::bench
