// Artifacts: the files a job wrote, uploaded one by one by the agent of the node the job is (or
// was last) bound to, kept under DIR/artifacts/<job>/<path>, listed and downloaded by whoever may
// see the job. Paths are checked (relative, no "." or ".." or empty segment, bounded) and the files
// are reached without following symbolic links, so nothing outside the job's directory is ever
// read or written. A job keeps at most ServerConfig::max_artifact_bytes_per_job bytes and
// kMaxArtifactFilesPerJob files; uploading a path again replaces the file.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <functional>
#include <mutex>

#include "server/api.h"
#include "server/api_error.h"
#include "server/blob_files.h"
#include "server/request_body.h"

namespace cnlab::server {
namespace {

constexpr size_t kMaxArtifactFilesPerJob = 10000;

// Uploads to one job are taken one at a time, so that the size limit holds against concurrent
// uploads; jobs share a few locks rather than each having one.
std::mutex& job_lock(const std::string& root, const std::string& job) {
  static std::array<std::mutex, 64> locks;
  return locks[std::hash<std::string>{}(root + "/" + job) % locks.size()];
}

// An error from blob_files names the path below the artifacts directory ("<job>/<path>"); the
// client knows it without the job.
Error without_job(Error error, const std::string& job) {
  if (error.field == "path" && error.value.starts_with(job + "/")) error.value.erase(0, job.size() + 1);
  return error;
}

}  // namespace

net::Response Api::put_artifact(const Call& call) {
  const std::string& id = call.param("id");
  if (!call.caller.is_node()) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "token", call.caller.user,
                                    "only the agent of the job's node uploads its artifacts"));
  }
  auto job = visible_job(call, id);  // for a node: a job bound to it
  if (!job) return error_response(job.error());
  const std::string& path = call.param("path");
  if (auto valid = check_relative_path(path, "path"); !valid) return error_response(valid.error());
  const std::string root = ctx_.dir.artifacts();
  const size_t size = body_size(call.request);
  const size_t limit = ctx_.config.max_artifact_bytes_per_job;

  std::lock_guard lock(job_lock(root, id));
  auto stored = list_blobs(root, id, /*hashes=*/false);
  if (!stored) return error_response(without_job(stored.error(), id));
  size_t others = 0;  // bytes of the job's other files
  bool replacing = false;
  for (const auto& file : *stored) {
    if (file.path == path) {
      replacing = true;
    } else {
      others += static_cast<size_t>(file.size_bytes);
    }
  }
  if (!replacing && stored->size() >= kMaxArtifactFilesPerJob) {
    return error_response(Error::of(ErrorCode::kTooLarge, "path", path,
                                    fmt::format("job {} already keeps {} artifacts, the most a job may keep", id,
                                                stored->size())));
  }
  if (others + size > limit) {
    return error_response(Error::of(
        ErrorCode::kTooLarge, "body", fmt::format("{} bytes", size),
        fmt::format("job {} would keep {} bytes of artifacts, over its limit of {} bytes ({} bytes stored{})", id,
                    others + size, limit, others, replacing ? " besides the file this one replaces" : "")));
  }
  auto written = store_body(call.request, root, id + "/" + path);
  if (!written) return error_response(without_job(written.error(), id));
  spdlog::info("artifact stored job=\"{}\" path=\"{}\" bytes={} node=\"{}\"", id, path, written->size_bytes,
               call.caller.node);
  return json_response(replacing ? 200 : 201,
                       {{"path", path}, {"size_bytes", written->size_bytes}, {"sha256", written->sha256}});
}

net::Response Api::list_artifacts(const Call& call) {
  const std::string& id = call.param("id");
  auto job = visible_job(call, id);
  if (!job) return error_response(job.error());
  auto files = list_blobs(ctx_.dir.artifacts(), id, /*hashes=*/true);
  if (!files) return error_response(without_job(files.error(), id));
  Json items = Json::array();
  int64_t total = 0;
  for (const auto& file : *files) {
    items.push_back({{"path", file.path}, {"size_bytes", file.size_bytes}, {"sha256", file.sha256}});
    total += file.size_bytes;
  }
  return json_response(200, {{"job", id}, {"items", std::move(items)}, {"total_bytes", total}});
}

net::Response Api::get_artifact(const Call& call) {
  const std::string& id = call.param("id");
  auto job = visible_job(call, id);
  if (!job) return error_response(job.error());
  const std::string& path = call.param("path");
  if (auto valid = check_relative_path(path, "path"); !valid) return error_response(valid.error());
  auto file = blob_file(ctx_.dir.artifacts(), id + "/" + path);
  if (!file) {
    if (file.error().code == ErrorCode::kNotFound) {
      return error_response(Error::not_found("path", path, "job " + id + " has no artifact at this path"));
    }
    return error_response(without_job(file.error(), id));
  }
  net::Response response;
  response.content_type = "application/octet-stream";
  response.body_file = std::move(*file);  // sent from the file, never held in memory
  return response;
}

}  // namespace cnlab::server
