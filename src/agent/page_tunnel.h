// The page stream of a post-copy migration, over mutual TLS between the two agents. CRIU's page
// server and `criu lazy-pages` speak plain TCP, so neither leaves loopback: on the source a
// PageGate listens on the node's address and lets through only the migration's target, proved by
// its node certificate; on the target a PageTunnel listens on loopback for `criu lazy-pages` and
// carries each connection to the gate, after checking that the gate presents the source's node
// certificate. Both certificates chain to the cluster's CA (see node_certificate.h).
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "agent/node_certificate.h"
#include "common/strings.h"

namespace cnlab::agent {

class PageGate {
 public:
  // Listens on `address` (a port the kernel picks) with this node's certificate `tls`, and relays
  // each connection from node `target` (its certificate) to 127.0.0.1:`backend_port` (CRIU's page
  // server).
  static Result<std::unique_ptr<PageGate>> open(const std::string& address, int backend_port, const NodeTls& tls,
                                                const std::string& target);
  virtual ~PageGate() = default;  // stops listening and relaying
  virtual int port() const = 0;
};

class PageTunnel {
 public:
  // Listens on 127.0.0.1 (a port the kernel picks) and carries each connection to `gate` over
  // mutual TLS: the gate must present node `source`'s certificate, and this node presents `tls`.
  static Result<std::unique_ptr<PageTunnel>> open(const HostPort& gate, const NodeTls& tls, const std::string& source);
  virtual ~PageTunnel() = default;  // stops listening and relaying
  virtual int port() const = 0;
};

}  // namespace cnlab::agent
