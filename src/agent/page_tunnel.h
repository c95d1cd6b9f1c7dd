// The page stream of a post-copy migration, over TLS between the two agents. CRIU's page server
// and `criu lazy-pages` speak plain TCP, so neither leaves loopback: on the source a PageGate
// listens on the node's address with a certificate made for this one migration and lets through
// only a peer that presents the migration's one-time token; on the target a PageTunnel listens
// on loopback for `criu lazy-pages` and carries each connection to the gate, after checking that
// the gate's certificate is the one whose SHA-256 fingerprint the server handed it. The token and
// fingerprint travel from source to target only through the server (node credentials over TLS).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "common/result.h"
#include "common/strings.h"

namespace cnlab::agent {

class PageGate {
 public:
  // Listens on `address` (a port the kernel picks) with a fresh self-signed certificate (made in
  // `dir`, the key 0600, both removed once loaded), and relays each connection that presents the
  // token to 127.0.0.1:`backend_port` (CRIU's page server).
  static Result<std::unique_ptr<PageGate>> open(const std::string& address, int backend_port,
                                                const std::filesystem::path& dir);
  virtual ~PageGate() = default;  // stops listening and relaying
  virtual int port() const = 0;
  virtual const std::string& fingerprint() const = 0;  // SHA-256 of its certificate (DER), hex
  virtual const std::string& token() const = 0;        // 64 hex characters
};

class PageTunnel {
 public:
  // Listens on 127.0.0.1 (a port the kernel picks) and carries each connection to `gate` over
  // TLS: the gate's certificate must have SHA-256 `fingerprint`, and `token` is presented first.
  static Result<std::unique_ptr<PageTunnel>> open(const HostPort& gate, const std::string& fingerprint,
                                                  const std::string& token);
  virtual ~PageTunnel() = default;  // stops listening and relaying
  virtual int port() const = 0;
};

}  // namespace cnlab::agent
