// Who this agent is to the server: its node name and node credential, kept in
// `<data-dir>/node.json` (mode 0600) so a restarted agent does not spend a join token again.
#pragma once

#include <string>

#include "agent/server_api.h"
#include "common/result.h"
#include "model/node.h"

namespace cnlab::agent {

struct NodeIdentity {
  std::string name;
  std::string token;  // the node credential
};

// The identity stored in `data_dir`, if any (kNotFound when there is none yet).
Result<NodeIdentity> load_identity(const std::string& data_dir);
Status save_identity(const std::string& data_dir, const NodeIdentity& identity);

// Registers `node` with the join token (POST /v1/nodes) and stores the credential it gets.
Result<NodeIdentity> register_node(const ServerAddress& server, const std::string& join_token, const model::Node& node,
                                   const std::string& data_dir);

}  // namespace cnlab::agent
