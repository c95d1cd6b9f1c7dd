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

}  // namespace cnlab::net
