// Agent to agent: where a migrating job's dump travels, straight from its source node to its
// target node over mutual TLS (both present node certificates, node_certificate.h), never through
// the server. The source first sends each large file of the dump by itself (PUT
// /v1/migrations/{job}/parts: the memory pages, never packed on one side nor unpacked on the other,
// spooled straight to disk and renamed into place, so that each side writes the memory once), then
// PUT /v1/migrations/{job} with an archive of the rest (a plain tar, with the list of the parts and
// their digests) and that archive's digest, which names the dump. The target keeps it, unpacked
// and its parts put back, under its `incoming` directory with the name of the node that sent it,
// and restores the job from it only once the server binds the job there with a migration from
// that node naming that digest (take_incoming_dump). A dump or parts nobody claims are removed
// after an hour. Nothing of a dump is read unless the server has asked for that job to move from
// its sender to this node (ExpectedMove, asked from each request's head), so no node can fill
// another's disk with dumps nobody asked for.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "agent/node_certificate.h"
#include "common/result.h"
#include "common/strings.h"

namespace cnlab::net {
class Client;
}

namespace cnlab::agent {

// The largest dump archive a peer endpoint takes (and a source packs): a job's memory, stored.
inline constexpr int64_t kMaxMigrationDumpBytes = int64_t{64} << 30;

// Whether the server has asked for `job` to move from node `from` to this one: ok, or the refusal
// (a kPermissionDenied saying so, or why it could not be told).
using ExpectedMove = std::function<Status(const std::string& job, const std::string& from)>;

class PeerEndpoint {
 public:
  // Listens on `listen` ("HOST:PORT", port 0: the kernel picks) with `tls`, taking dumps of up to
  // `max_dump_bytes` into `incoming`, written there as they arrive (never held in memory), of the
  // moves `expected` says were asked for (an answer is remembered for a few minutes).
  static Result<std::unique_ptr<PeerEndpoint>> start(const std::string& listen, const NodeTls& tls,
                                                     const std::filesystem::path& incoming, int64_t max_dump_bytes,
                                                     ExpectedMove expected);
  virtual ~PeerEndpoint() = default;
  virtual uint16_t port() const = 0;
};

// Files of a dump this large or larger travel as parts of their own: the memory pages of a
// stop-and-copy dump. A post-copy dump (1.4 MiB, no pages) goes whole in the archive, one request.
inline constexpr int64_t kDumpPartMinBytes = int64_t{8} << 20;
// In a dump's archive: the list of its parts, {"parts": [{"path", "mode", "sha256"}]}.
inline constexpr const char* kDumpPartsFile = ".cnlab-dump-parts.json";

// The source's connection to node `target`'s peer endpoint at `address` (which must present
// `target`'s node certificate), for one job's dump. Files are read as they are sent, never held
// in memory.
class DumpSender {
 public:
  static Result<std::unique_ptr<DumpSender>> connect(const HostPort& address, const std::string& target,
                                                     const NodeTls& tls);
  ~DumpSender();
  // Sends each regular file of at least `min_bytes` under the dump directory `dump` as a part,
  // removes it from `dump` once the target holds it, and lists it (its path, mode and the digest
  // the target computed) in dump/kDumpPartsFile. Returns the bytes sent.
  Result<int64_t> send_parts(const std::string& job, const std::filesystem::path& dump,
                             int64_t min_bytes = kDumpPartMinBytes);
  // Sends the archive file `archive` of what is left (digest `digest`): the dump is complete.
  Status send_archive(const std::string& job, const std::filesystem::path& archive, const std::string& digest);

 private:
  DumpSender(std::unique_ptr<net::Client> client, std::string target);
  Result<std::string> send_part(const std::string& job, const std::filesystem::path& file);

  std::unique_ptr<net::Client> client_;
  std::string target_;
};

// Moves the dump of `job` that node `from` sent with `digest` to `to` (which must not exist).
// kNotFound when no such dump arrived (none, another sender or another digest).
Status take_incoming_dump(const std::filesystem::path& incoming, const std::string& job, const std::string& from,
                          const std::string& digest, const std::filesystem::path& to);

}  // namespace cnlab::agent
