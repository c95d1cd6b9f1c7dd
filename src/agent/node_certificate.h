// This node's certificate from the cluster's CA: what two agents show each other when one streams
// a migrating job to the other (peer_endpoint.h) or pulls its memory (page_tunnel.h), so that no
// job travels through the server and no other machine can pose as a node. The key is made here
// (0600) and never leaves the node; the server signs a request for the name the node's credential
// is bound to (POST /v1/nodes/{name}/certificate).
#pragma once

#include <string>

#include "agent/server_api.h"
#include "common/result.h"

namespace cnlab::agent {

struct NodeTls {
  std::string node;       // whose certificate it is
  std::string cert_file;  // PEM
  std::string key_file;   // PEM, mode 0600
  std::string ca_file;    // the cluster's CA (PEM), which every node certificate chains to
};

// The certificate kept in `<data_dir>/tls/`, fetched anew when there is none, it names another
// node, or less than a third of its life is left (then `*renewed` is set). `token` is the node's
// credential.
Result<NodeTls> ensure_node_certificate(const ServerAddress& server, const std::string& token,
                                        const std::string& data_dir, const std::string& node,
                                        bool* renewed = nullptr);

}  // namespace cnlab::agent
