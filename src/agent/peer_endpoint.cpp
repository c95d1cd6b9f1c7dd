#include "agent/peer_endpoint.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <map>
#include <mutex>

#include "agent/files/files.h"
#include "model/object_meta.h"
#include "model/workspace.h"
#include "net/net.h"
#include "net/tls_files.h"

namespace cnlab::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kPathPrefix = "/v1/migrations/";
constexpr const char* kPartsSuffix = "/parts";
constexpr auto kUnclaimedFor = 1h;  // a migration's target binds within minutes (--migration-timeout)
constexpr auto kSendTimeout = 10min;
constexpr auto kAdmittedFor = 10min;  // a move's dump is sent within minutes of its request

net::Response answer(int status, const Json& body) {
  net::Response response;
  response.status = status;
  response.body = body.dump();
  return response;
}

net::Response refuse(int status, const Error& error) {
  return answer(status, {{"error", {{"field", error.field}, {"value", error.value}, {"message", error.message}}}});
}

// The node a verified client certificate names ("<node>.node.cnlab"), or "".
std::string sender_of(const net::Request& request) {
  const std::string suffix = net::node_dns_name("");
  for (const auto& name : request.peer_dns_names) {
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return name.substr(0, name.size() - suffix.size());
    }
  }
  return "";
}

fs::path meta_of(const fs::path& incoming, const std::string& job) { return incoming / (job + ".json"); }
fs::path parts_of(const fs::path& incoming, const std::string& job) { return incoming / (job + ".parts"); }

// The job a request is for ("" when its path is none of this endpoint's) and whether it sends a part.
std::pair<std::string, bool> job_of(const std::string& path) {
  std::string job = path.rfind(kPathPrefix, 0) == 0 ? path.substr(std::string(kPathPrefix).size()) : "";
  const bool part = job.ends_with(kPartsSuffix);
  if (part) job.resize(job.size() - std::string(kPartsSuffix).size());
  return {job, part};
}

class Endpoint final : public PeerEndpoint {
 public:
  Endpoint(fs::path incoming, int64_t max_dump_bytes, ExpectedMove expected)
      : incoming_(std::move(incoming)), max_dump_bytes_(max_dump_bytes), expected_(std::move(expected)) {}
  ~Endpoint() override {
    if (server_) server_->stop();
  }

  Status start(const std::string& listen, const NodeTls& tls) {
    std::error_code ec;
    fs::create_directories(incoming_, ec);
    fs::permissions(incoming_, fs::perms::owner_all, ec);  // a dump holds the job's memory: the agent's alone
    if (!fs::is_directory(incoming_)) return Error::internal("cannot create " + incoming_.string());
    // What a dump cut off by a crash left: its spooled body, its parts or its archive (kept dumps
    // stay, for their runners to claim).
    for (const auto& entry : fs::directory_iterator(incoming_, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with(".request-") || entry.path().extension() == ".archive") fs::remove(entry.path(), ec);
      if (entry.path().extension() == ".parts") (void)safe_remove_tree(entry.path().string());
    }
    net::ServerOptions options;
    options.listen = listen;
    options.cert_file = tls.cert_file;
    options.key_file = tls.key_file;
    options.client_ca_file = tls.ca_file;
    options.io_threads = 1;
    options.worker_threads = 4;
    options.max_body_bytes = static_cast<size_t>(max_dump_bytes_);
    // Never more than the disk can hold: a dump too big is refused before any of it is sent.
    options.body_limit_for = [this](const std::string&, const std::string&, const std::map<std::string, std::string>&) {
      return static_cast<size_t>(std::min(max_dump_bytes_, free_disk_bytes(incoming_)));
    };
    options.spool_dir_for = [this](const std::string&, const std::string&) { return incoming_.string(); };
    options.admit = [this](const net::Request& head) { return admit(head); };
    auto server = net::Server::start(options, [this](const net::Request& request) { return handle(request); });
    if (!server) return server.error();
    server_ = std::move(*server);
    return {};
  }
  uint16_t port() const override { return server_->port(); }

 private:
  // From a request's head, before any of its body is read: only a dump of a move the server asked
  // for, from that move's source, gets in. Other requests go on to handle(), which refuses them.
  std::optional<net::Response> admit(const net::Request& head) {
    const std::string from = sender_of(head);
    const auto [job, part] = job_of(head.path);
    if (from.empty() || head.method != "PUT" || job.empty() || !model::validate_name(job, "job")) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard lock(expected_mutex_);
      auto known = admitted_.find(job);
      if (known != admitted_.end() && known->second.first == from && now - known->second.second < kAdmittedFor) {
        return std::nullopt;
      }
    }
    if (Status asked = expected_(job, from); !asked) {
      spdlog::warn("migration dump refused job=\"{}\" from=\"{}\" error=\"{}\"", job, from, asked.error().to_string());
      return refuse(403, Error::of(ErrorCode::kPermissionDenied, "job", job,
                                   "no move of this job from " + from + " to this node was asked for: " +
                                       asked.error().message));
    }
    std::lock_guard lock(expected_mutex_);
    std::erase_if(admitted_, [&](const auto& entry) { return now - entry.second.second >= kAdmittedFor; });
    admitted_[job] = {from, now};
    return std::nullopt;
  }

  net::Response handle(const net::Request& request) {
    const std::string from = sender_of(request);
    if (from.empty()) return refuse(403, Error::of(ErrorCode::kPermissionDenied, "certificate", "", "only nodes send dumps"));
    const auto [job, part] = job_of(request.path);
    if (request.method != "PUT" || job.empty()) {
      return refuse(404, Error::not_found("path", request.path,
                                          "this endpoint takes PUT /v1/migrations/{job} and PUT /v1/migrations/{job}/parts"));
    }
    if (auto valid = model::validate_name(job, "job"); !valid) return refuse(400, valid.error());
    if (part) return keep_part(job, from, request);
    const std::string digest = request.header("checkpoint-digest");
    if (auto valid = model::validate_digest(digest, "Checkpoint-Digest"); !valid) return refuse(400, valid.error());
    std::lock_guard lock(mutex_);
    remove_unclaimed();
    const auto unpacking = std::chrono::steady_clock::now();
    auto kept = keep(job, from, digest, request.body_file, request.body_sha256);
    if (!kept) {
      spdlog::warn("migration dump refused job=\"{}\" from=\"{}\" error=\"{}\"", job, from, kept.error().to_string());
      return refuse(kept.error().code == ErrorCode::kInvalidArgument ? 400 : 500, kept.error());
    }
    spdlog::info("migration dump received job=\"{}\" from=\"{}\" digest=\"{}\" unpack_ms={}", job, from, digest,
                 std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - unpacking).count());
    return answer(201, {{"digest", digest}});
  }

  // A part of a dump (a large file of it), kept as incoming/<job>.parts/<its sha256> until the
  // dump's archive names it. Its digest is the one computed as it arrived, never the sender's word.
  net::Response keep_part(const std::string& job, const std::string& from, const net::Request& request) {
    if (request.body_file.empty() || request.body_sha256.empty()) {
      return refuse(411, Error::invalid_argument("Content-Length", request.header("content-length"),
                                                 "a part of a dump is sent with its length"));
    }
    std::error_code ec;
    const fs::path parts = parts_of(incoming_, job);
    fs::create_directories(parts, ec);
    fs::rename(request.body_file, parts / request.body_sha256, ec);
    if (ec) return refuse(500, Error::internal("cannot keep a part of the dump in " + parts.string() + ": " + ec.message()));
    spdlog::debug("migration dump part received job=\"{}\" from=\"{}\" sha256=\"{}\"", job, from, request.body_sha256);
    return answer(201, {{"sha256", request.body_sha256}});
  }

  // Unpacks the spooled archive `body_file` (its digest checked: `sha256`, hashed as it arrived,
  // when the HTTP layer did) as incoming/<job>, puts the parts it lists back in place, and records
  // who sent it beside it.
  Status keep(const std::string& job, const std::string& from, const std::string& digest, const std::string& body_file,
              const std::string& sha256) {
    std::error_code ec;
    const fs::path archive = incoming_ / (job + ".archive"), dir = incoming_ / job;
    (void)safe_remove_tree(dir.string());
    fs::remove(meta_of(incoming_, job), ec);
    fs::rename(body_file, archive, ec);
    if (ec) return Error::internal("cannot keep the dump as " + archive.string() + ": " + ec.message());
    UnpackLimits limits;
    limits.max_content_bytes = free_disk_bytes(incoming_);  // memory pages compress well; the disk decides
    const std::string arrived = sha256.empty() ? "" : std::string(model::kDigestPrefix) + sha256;
    if (!arrived.empty() && arrived != digest) {
      fs::remove(archive, ec);
      return Error::invalid_argument("Checkpoint-Digest", digest,
                                     "the dump that arrived has digest " + arrived + "; it changed on the way");
    }
    auto unpacked = arrived.empty() ? unpack_workspace(archive.string(), digest, dir.string(), limits)
                                    : extract_workspace(archive.string(), dir.string(), limits);
    fs::remove(archive, ec);
    Status placed = unpacked ? place_parts(job, dir) : Status(unpacked.error());
    (void)safe_remove_tree(parts_of(incoming_, job).string());
    if (!placed) {
      (void)safe_remove_tree(dir.string());
      return placed;
    }
    std::ofstream(meta_of(incoming_, job), std::ios::trunc) << Json{{"from", from}, {"digest", digest}}.dump();
    return {};
  }

  // Moves the parts that dir/kDumpPartsFile lists from incoming/<job>.parts to their places in
  // `dir`. The list came from another node: each path is checked (place_file.h), each part must
  // have arrived with the digest listed.
  Status place_parts(const std::string& job, const fs::path& dir) {
    const fs::path list_file = dir / kDumpPartsFile;
    std::error_code ec;
    if (!fs::exists(list_file, ec)) return {};
    std::ifstream in(list_file);
    Json list = Json::parse(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), nullptr, false);
    fs::remove(list_file, ec);
    if (!list.is_object() || !list.contains("parts") || !list["parts"].is_array()) {
      return Error::invalid_argument(kDumpPartsFile, "", "not a list of parts: {\"parts\": [{\"path\", \"mode\", \"sha256\"}]}");
    }
    std::map<std::string, int> uses;  // a part listed twice (two equal files) is copied for all but its last use
    for (const Json& entry : list["parts"]) {
      if (entry.is_object() && entry.contains("sha256") && entry["sha256"].is_string()) ++uses[entry["sha256"].get<std::string>()];
    }
    const fs::path parts = parts_of(incoming_, job);
    for (const Json& entry : list["parts"]) {
      if (!entry.is_object() || !entry.contains("path") || !entry["path"].is_string() || !entry.contains("sha256") ||
          !entry["sha256"].is_string() || !entry.contains("mode") || !entry["mode"].is_number_unsigned()) {
        return Error::invalid_argument(kDumpPartsFile, entry.dump(), "each part is {\"path\", \"mode\", \"sha256\"}");
      }
      const std::string path = entry["path"], sha256 = entry["sha256"];
      if (auto valid = model::validate_digest(std::string(model::kDigestPrefix) + sha256, "sha256"); !valid) {
        return valid.error();
      }
      fs::path part = parts / sha256;
      if (!fs::is_regular_file(fs::symlink_status(part, ec))) {
        return Error::invalid_argument("part", path, "its content (sha256 " + sha256 + ") did not arrive before the dump");
      }
      if (--uses[sha256] > 0) {
        const fs::path copy = parts / (sha256 + ".copy");
        fs::copy_file(part, copy, fs::copy_options::overwrite_existing, ec);
        if (ec) return Error::internal("cannot copy a part of the dump: " + ec.message());
        part = copy;
      }
      if (auto placed = place_file(part.string(), dir.string(), path, entry["mode"].get<unsigned>()); !placed) {
        return placed;
      }
    }
    return {};
  }

  void remove_unclaimed() {
    std::error_code ec;
    const auto now = fs::file_time_type::clock::now();
    for (const auto& entry : fs::directory_iterator(incoming_, ec)) {
      if (now - entry.last_write_time(ec) < kUnclaimedFor) continue;
      if (entry.path().extension() == ".parts") {
        (void)safe_remove_tree(entry.path().string());
      } else if (entry.path().extension() == ".json") {
        (void)safe_remove_tree((incoming_ / entry.path().stem()).string());
        fs::remove(entry.path(), ec);
      }
    }
  }

  fs::path incoming_;
  int64_t max_dump_bytes_;
  ExpectedMove expected_;
  std::mutex expected_mutex_;
  // Moves the server confirmed: job -> (its source, when), so that each part of a dump does not ask
  // again. A job cancelled meanwhile is not restored: the server never binds it here.
  std::map<std::string, std::pair<std::string, std::chrono::steady_clock::time_point>> admitted_;
  std::mutex mutex_;  // one dump kept at a time
  std::unique_ptr<net::Server> server_;
};

}  // namespace

Result<std::unique_ptr<PeerEndpoint>> PeerEndpoint::start(const std::string& listen, const NodeTls& tls,
                                                          const fs::path& incoming, int64_t max_dump_bytes,
                                                          ExpectedMove expected) {
  auto endpoint = std::make_unique<Endpoint>(incoming, max_dump_bytes, std::move(expected));
  if (auto started = endpoint->start(listen, tls); !started) return started.error();
  return std::unique_ptr<PeerEndpoint>(std::move(endpoint));
}

DumpSender::DumpSender(std::unique_ptr<net::Client> client, std::string target)
    : client_(std::move(client)), target_(std::move(target)) {}
DumpSender::~DumpSender() = default;

Result<std::unique_ptr<DumpSender>> DumpSender::connect(const HostPort& address, const std::string& target,
                                                        const NodeTls& tls) {
  net::ClientOptions options;
  options.url = "https://" + format_host_port(address);
  options.ca_file = tls.ca_file;
  options.cert_file = tls.cert_file;
  options.key_file = tls.key_file;
  options.server_name = net::node_dns_name(target);
  options.timeout = kSendTimeout;
  auto client = net::Client::connect(options);
  if (!client) return client.error();
  return std::unique_ptr<DumpSender>(new DumpSender(std::move(*client), target));
}

Result<std::string> DumpSender::send_part(const std::string& job, const fs::path& file) {
  auto response = client_->upload("PUT", kPathPrefix + job + kPartsSuffix, file.string(),
                                  {{"Content-Type", "application/octet-stream"}});
  if (!response) return response.error();
  if (response->status / 100 != 2) return net::error_from_response(response->status, response->body, "node " + target_);
  Json answer = Json::parse(response->body, nullptr, false);
  if (!answer.is_object() || !answer.contains("sha256") || !answer["sha256"].is_string()) {
    return Error::internal("node " + target_ + " took a part of the dump without saying its digest");
  }
  return answer["sha256"].get<std::string>();
}

Result<int64_t> DumpSender::send_parts(const std::string& job, const fs::path& dump, int64_t min_bytes) {
  struct Large {
    fs::path file;
    unsigned mode;
  };
  std::vector<Large> large;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dump, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const auto status = it->symlink_status(ec);  // a link is packed as a link, never followed
    if (!ec && fs::is_regular_file(status) && static_cast<int64_t>(it->file_size(ec)) >= min_bytes && !ec) {
      large.push_back({it->path(), static_cast<unsigned>(status.permissions() & fs::perms::all)});
    }
  }
  if (ec) return Error::internal("cannot list the dump in " + dump.string() + ": " + ec.message());
  Json parts = Json::array();
  int64_t sent = 0;
  for (const Large& part : large) {
    const int64_t size = static_cast<int64_t>(fs::file_size(part.file, ec));
    auto sha256 = send_part(job, part.file);
    if (!sha256) return sha256.error();
    parts.push_back({{"path", part.file.lexically_relative(dump).generic_string()}, {"mode", part.mode}, {"sha256", *sha256}});
    fs::remove(part.file, ec);  // it travels as the part now, not in the archive
    sent += size;
  }
  std::ofstream list(dump / kDumpPartsFile, std::ios::trunc);
  list << Json{{"parts", parts}}.dump();
  if (!list.flush()) return Error::internal("cannot write " + (dump / kDumpPartsFile).string());
  return sent;
}

Status DumpSender::send_archive(const std::string& job, const fs::path& archive, const std::string& digest) {
  auto response = client_->upload("PUT", kPathPrefix + job, archive.string(),
                                  {{"Content-Type", "application/octet-stream"}, {"Checkpoint-Digest", digest}});
  if (!response) return response.error();
  if (response->status / 100 != 2) return net::error_from_response(response->status, response->body, "node " + target_);
  return {};
}

Status take_incoming_dump(const fs::path& incoming, const std::string& job, const std::string& from,
                          const std::string& digest, const fs::path& to) {
  std::ifstream in(meta_of(incoming, job));
  Json meta = Json::parse(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), nullptr, false);
  if (!meta.is_object() || meta.value("from", "") != from || meta.value("digest", "") != digest) {
    return Error::not_found("dump", digest, "no dump of job " + job + " with this digest arrived from node " + from);
  }
  std::error_code ec;
  fs::rename(incoming / job, to, ec);
  if (ec) return Error::internal("cannot move the dump of job " + job + " to " + to.string() + ": " + ec.message());
  fs::remove(meta_of(incoming, job), ec);
  return {};
}

}  // namespace cnlab::agent
