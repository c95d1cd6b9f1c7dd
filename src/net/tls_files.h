// Making the files a private TLS deployment needs: a CA of its own and a server certificate signed
// by it (what `cnlab server init` writes). EC P-256 keys, SHA-256 signatures; private keys are
// written with mode 0600, certificates with 0644, each through a temporary file and a rename.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace cnlab::net {

// A self-signed CA certificate (basicConstraints CA:TRUE, keyCertSign) valid for `days`.
Status create_ca(const std::string& cert_path, const std::string& key_path, const std::string& common_name,
                 int days);

// A server certificate signed by the CA in `ca_cert`/`ca_key`, with the given DNS names and IP
// addresses as subject alternative names (at least one of them) and the serverAuth usage.
Status issue_server_cert(const std::string& ca_cert, const std::string& ca_key, const std::string& cert_path,
                         const std::string& key_path, const std::vector<std::string>& dns_names,
                         const std::vector<std::string>& ip_addresses, int days);

// Node certificates: the CA above vouches for each agent's name, so two agents can stream a job to
// each other over mutual TLS without the server in the path. A node's key never leaves it: the
// agent sends a certificate signing request, the server signs it for the name the agent's node
// credential is bound to.

// The DNS name a node's certificate carries: "<node>.node.cnlab" (no server certificate or other
// node can carry it).
std::string node_dns_name(const std::string& node);

struct KeyAndRequest {
  std::string key_pem;      // a fresh EC P-256 private key
  std::string request_pem;  // a certificate signing request signed with it
};
Result<KeyAndRequest> create_key_and_request(const std::string& common_name);

// Signs the request in `request_pem` as node `node`'s certificate: CN=node, the DNS name
// node_dns_name(node), serverAuth and clientAuth, valid for `days`. The request's own signature
// must verify (whoever sent it holds the key); its subject and extensions are ignored. Returns the
// certificate (PEM).
Result<std::string> issue_node_cert(const std::string& ca_cert, const std::string& ca_key,
                                    const std::string& request_pem, const std::string& node, int days);

struct CertInfo {
  std::vector<std::string> dns_names;
  int64_t not_before = 0;  // seconds since the epoch
  int64_t not_after = 0;
};
// What a PEM certificate says of itself (not whether to trust it).
Result<CertInfo> read_cert_info(const std::string& pem);

// Writes `text` to `path` (through a temporary file and a rename) with `mode`.
Status write_private_file(const std::string& path, const std::string& text, unsigned mode);

}  // namespace cnlab::net
