// Agent to agent: where a migrating job's dump travels, straight from its source node to its
// target node over mutual TLS (both present node certificates, node_certificate.h), never through
// the server. The source sends PUT /v1/migrations/{job} with the dump's archive and digest; the
// target keeps it, unpacked, under its `incoming` directory with the name of the node that sent
// it, and restores the job from it only once the server binds the job there with a migration from
// that node naming that digest (take_incoming_dump). A dump nobody claims is removed after an hour.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "agent/node_certificate.h"
#include "common/result.h"
#include "common/strings.h"

namespace cnlab::agent {

// The largest dump archive a peer endpoint takes (and a source packs): a job's memory, stored.
inline constexpr int64_t kMaxMigrationDumpBytes = int64_t{64} << 30;

class PeerEndpoint {
 public:
  // Listens on `listen` ("HOST:PORT", port 0: the kernel picks) with `tls`, taking dumps of up to
  // `max_dump_bytes` into `incoming`, written there as they arrive (never held in memory).
  static Result<std::unique_ptr<PeerEndpoint>> start(const std::string& listen, const NodeTls& tls,
                                                     const std::filesystem::path& incoming, int64_t max_dump_bytes);
  virtual ~PeerEndpoint() = default;
  virtual uint16_t port() const = 0;
};

// Sends the archive file `archive` (digest `digest`) of job `job`'s dump to node `target`'s peer
// endpoint at `address`, read as it is sent; the endpoint must present `target`'s node certificate.
Status send_dump(const HostPort& address, const std::string& target, const NodeTls& tls, const std::string& job,
                 const std::filesystem::path& archive, const std::string& digest);

// Moves the dump of `job` that node `from` sent with `digest` to `to` (which must not exist).
// kNotFound when no such dump arrived (none, another sender or another digest).
Status take_incoming_dump(const std::filesystem::path& incoming, const std::string& job, const std::string& from,
                          const std::string& digest, const std::filesystem::path& to);

}  // namespace cnlab::agent
