// Checkpoints: what a checkpointable job saved in CNLAB_CHECKPOINT_DIR when it was taken off a node,
// uploaded by that node's agent as a workspace archive and handed to the job's next start, on any
// node. Archives are stored once per digest as DIR/checkpoints/<hex>; the job's status names the
// latest (status.checkpoint) and the ones kept before it (status.older_checkpoints), at most
// kKeptCheckpointsPerJob in all. An archive no job names any more is removed.
//
// Who: the upload comes from a node the job is bound to now or that ran its latest attempt (the
// agent uploads after the job was pre-empted, when the job's placement is already cleared); the
// download from the node the job is bound to now, or a user who may see the job's project.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "server/api.h"
#include "server/api_error.h"
#include "server/blob_files.h"
#include "server/request_body.h"
#include "server/job_writes.h"
#include "common/strings.h"

namespace cnlab::server {

namespace {

constexpr const char* kDigestHeader = "checkpoint-digest";
constexpr const char* kTakenAtHeader = "checkpoint-taken-at";
// "files" (default) or "process": what the archive holds (model::CheckpointRef::kind).
constexpr const char* kKindHeader = "checkpoint-kind";
// With "process": how many of its processes the dump holds with their GPU state suspended by
// cuda-checkpoint (model::CheckpointRef::gpu_state). Absent, a dump of a job holding GPUs may hold
// some (an agent from before the count was sent).
constexpr const char* kCudaProcessesHeader = "checkpoint-cuda-processes";
constexpr int64_t kMaxCudaProcesses = 1 << 20;

// Writes of archives and the removal of those no job names go one at a time, so that a removal
// never takes an archive another job's upload has just written and is about to name.
std::mutex& archives_lock() {
  static std::mutex lock;
  return lock;
}

// "sha256:<64 hex>" or the 64 hex digits alone, as "sha256:<64 hex>".
Result<std::string> parse_digest(const std::string& text, const std::string& field) {
  std::string digest = text.find(':') == std::string::npos ? std::string(model::kDigestPrefix) + text : text;
  if (!model::validate_digest(digest, field)) {
    return Error::invalid_argument(field, text,
                                   "expected \"sha256:\" followed by 64 lowercase hex digits, or the 64 digits alone");
  }
  return digest;
}

bool names_checkpoint(const model::Job& job, const std::string& digest) {
  if (job.status.checkpoint && job.status.checkpoint->digest == digest) return true;
  return std::any_of(job.status.older_checkpoints.begin(), job.status.older_checkpoints.end(),
                     [&](const model::CheckpointRef& c) { return c.digest == digest; });
}

}  // namespace

net::Response Api::put_checkpoint(const Call& call) {
  const std::string& id = call.param("id");
  const Caller& caller = call.caller;
  if (!caller.is_node()) {
    return error_response(Error::of(ErrorCode::kPermissionDenied, "token", caller.user,
                                    "only the agent of the node that ran the job uploads its checkpoint"));
  }
  auto cached = ctx_.cache.read([&](const ObjectCache& c) { return c.jobs.get(id); });
  if (!cached.object ||
      !(model::bound_to(*cached.object, caller.node) || model::ran_latest_attempt_on(*cached.object, caller.node))) {
    return error_response(Error::not_found("job", id, "no such job on node " + caller.node));
  }
  std::string given = call.request.header(kDigestHeader);
  if (given.empty()) {
    return error_response(Error::invalid_argument("Checkpoint-Digest", "",
                                                  "required: the archive's digest, \"sha256:<64 hex>\""));
  }
  auto digest = parse_digest(given, "Checkpoint-Digest");
  if (!digest) return error_response(digest.error());
  Time taken_at = call.now;
  if (std::string text = call.request.header(kTakenAtHeader); !text.empty()) {
    auto parsed = parse_rfc3339(text, "Checkpoint-Taken-At");
    if (!parsed) return error_response(parsed.error());
    taken_at = std::min(*parsed, call.now);  // a clock ahead of the server's does not make it newer
  }
  std::string kind = call.request.header(kKindHeader);
  if (kind.empty()) kind = "files";
  if (kind != "files" && kind != "process") {
    return error_response(Error::invalid_argument("Checkpoint-Kind", kind, "\"files\" or \"process\""));
  }
  const std::string cuda_text = call.request.header(kCudaProcessesHeader);
  int64_t cuda_processes = -1;
  if (!cuda_text.empty()) {
    auto parsed = parse_int(cuda_text, "Checkpoint-Cuda-Processes");
    if (kind != "process" || !parsed || *parsed < 0 || *parsed > kMaxCudaProcesses) {
      return error_response(Error::invalid_argument(
          "Checkpoint-Cuda-Processes", cuda_text,
          fmt::format("an integer from 0 to {}, sent only with Checkpoint-Kind \"process\"", kMaxCudaProcesses)));
    }
    cuda_processes = *parsed;
  }
  // Spooled to a file by the HTTP layer (Api::spool_dir); in memory where that could not be.
  const size_t size = body_size(call.request);
  const size_t limit = ctx_.config.max_checkpoint_bytes;
  if (size > limit) {
    return error_response(Error::of(ErrorCode::kTooLarge, "body", fmt::format("{} bytes", size),
                                    fmt::format("a checkpoint archive may have at most {} bytes (the server's "
                                                "--max-checkpoint-bytes)",
                                                limit)));
  }
  const std::string root = ctx_.dir.checkpoints();
  const std::string hex = model::workspace_name(*digest);

  std::lock_guard lock(archives_lock());
  auto matches_digest = [&](const BlobInfo& info) -> Status {
    if (info.sha256 == hex) return Status::ok();
    return Error::invalid_argument("Checkpoint-Digest", *digest,
                                   fmt::format("the body's SHA-256 is sha256:{}, not the digest given; the archive "
                                               "changed on the way or the digest was computed over something else",
                                               info.sha256));
  };
  auto written = store_body(call.request, root, hex, matches_digest);
  if (!written) return error_response(written.error());

  // Which nodes can resume a process checkpoint of a job holding GPUs: the scheduler starts it again
  // only on GPUs of the same kind, and one with GPU state only where cuda-checkpoint is
  // (sched/node_traits.h).
  const bool holds_gpus = kind == "process" && cached.object->spec.gpu.kind != model::SliceKind::kNone;
  std::string gpus;
  if (holds_gpus) {
    auto uploader = ctx_.cache.read([&](const ObjectCache& c) { return c.nodes.get(caller.node); });
    gpus = uploader.object && uploader.object->simulated ? "simulated" : "real";
  }
  model::CheckpointRef taken{*digest, written->size_bytes, taken_at, kind, holds_gpus && cuda_processes != 0, gpus};
  std::vector<model::CheckpointRef> dropped;
  Json audit = audit_record(call, "jobs.checkpoint", id, "ok", {{"digest", *digest}, {"size_bytes", taken.size_bytes}});
  auto updated = update_job(
      ctx_.store, &ctx_.cache, id,
      [&](model::Job& job) -> Result<bool> {
        dropped.clear();
        if (!model::bound_to(job, caller.node) && !model::ran_latest_attempt_on(job, caller.node)) {
          return Error::not_found("job", id, "no such job on node " + caller.node);
        }
        if (model::is_terminal(job.status.phase)) {
          return Error::of(ErrorCode::kConflict, "job", id,
                           "the job is " + std::string(model::to_string(job.status.phase)) +
                               "; it will not run again, so it takes no checkpoint");
        }
        // The new one first, then the ones before it; one entry per digest, the most recent kept.
        std::vector<model::CheckpointRef> kept = {taken};
        if (job.status.checkpoint) kept.push_back(*job.status.checkpoint);
        kept.insert(kept.end(), job.status.older_checkpoints.begin(), job.status.older_checkpoints.end());
        std::vector<model::CheckpointRef> unique;
        for (const auto& c : kept) {
          bool seen = std::any_of(unique.begin(), unique.end(), [&](const auto& u) { return u.digest == c.digest; });
          if (seen) continue;
          if (unique.size() < model::kKeptCheckpointsPerJob) {
            unique.push_back(c);
          } else {
            dropped.push_back(c);
          }
        }
        job.status.checkpoint = unique.front();
        job.status.older_checkpoints.assign(unique.begin() + 1, unique.end());
        job.status.last_checkpoint_at = taken_at;
        job.status.events.push_back({model::JobEventType::kCheckpointed, call.now,
                                     fmt::format("{} checkpoint {} ({} bytes) uploaded by {}", kind, *digest,
                                                 taken.size_bytes, caller.node)});
        return true;
      },
      audit.dump());

  // Archives no job names any more (a failed commit may leave the one just written unnamed).
  std::set<std::string> candidates;
  for (const auto& c : dropped) candidates.insert(c.digest);
  if (!updated) candidates.insert(*digest);
  for (const auto& candidate : candidates) {
    bool named = ctx_.cache.read([&](const ObjectCache& c) {
      bool found = false;
      c.jobs.for_each([&](const std::string&, const model::Job& job, int64_t) {
        found = found || names_checkpoint(job, candidate);
      });
      return found;
    });
    if (named) continue;
    if (auto removed = remove_blob(root, model::workspace_name(candidate)); !removed) {
      spdlog::warn("checkpoint archive not removed digest=\"{}\" error=\"{}\"", candidate, removed.error().to_string());
    } else if (updated) {
      spdlog::info("checkpoint archive removed digest=\"{}\" job=\"{}\"", candidate, id);
    }
  }
  if (!updated) return error_response(updated.error());
  ctx_.metrics.checkpoints.inc({{"outcome", "stored"}, {"kind", kind}});
  spdlog::info("checkpoint stored job=\"{}\" digest=\"{}\" bytes={} node=\"{}\"", id, *digest, taken.size_bytes,
               caller.node);
  return json_response(201, {{"job", id}, {"checkpoint", model::to_json(taken)}});
}

net::Response Api::get_checkpoint(const Call& call) {
  const std::string& id = call.param("id");
  auto job = visible_job(call, id);  // a node: only a job bound to it now
  if (!job) return error_response(job.error());
  const model::JobStatus& status = job->object->status;
  std::optional<model::CheckpointRef> chosen = status.checkpoint;
  if (std::string wanted = call.request.query_value("digest"); !wanted.empty()) {
    auto digest = parse_digest(wanted, "digest");
    if (!digest) return error_response(digest.error());
    chosen.reset();
    if (status.checkpoint && status.checkpoint->digest == *digest) chosen = status.checkpoint;
    for (const auto& c : status.older_checkpoints) {
      if (!chosen && c.digest == *digest) chosen = c;
    }
    if (!chosen) return error_response(Error::not_found("digest", *digest, "job " + id + " keeps no such checkpoint"));
  }
  if (!chosen) return error_response(Error::not_found("job", id, "job " + id + " has no checkpoint"));
  auto file = blob_file(ctx_.dir.checkpoints(), model::workspace_name(chosen->digest));
  if (!file) {
    spdlog::error("checkpoint archive missing job=\"{}\" digest=\"{}\" error=\"{}\"", id, chosen->digest,
                  file.error().to_string());
    return error_response(Error::not_found("digest", chosen->digest, "the checkpoint's archive is missing on the server"));
  }
  net::Response response;
  response.content_type = "application/octet-stream";
  response.headers.emplace_back("Checkpoint-Digest", chosen->digest);
  response.headers.emplace_back("Checkpoint-Taken-At", format_rfc3339(chosen->taken_at));
  response.body_file = std::move(*file);  // sent from the file: a process checkpoint is as big as the job's memory
  return response;
}

}  // namespace cnlab::server
