// The files of an installation, all under one data directory (mode 0700).
#pragma once

#include <string>

#include "common/result.h"

namespace cnlab::server {

struct DataDir {
  std::string root;
  // Where checkpoint archives go when not under `root` (the server's --checkpoint-dir): a larger
  // volume, for instance. Empty: <root>/checkpoints.
  std::string checkpoint_root;

  std::string ca_cert() const { return root + "/ca.pem"; }
  std::string ca_key() const { return root + "/ca.key"; }
  std::string server_cert() const { return root + "/server.pem"; }
  std::string server_key() const { return root + "/server.key"; }
  std::string signing_key() const { return root + "/signing.key"; }
  std::string admin_token() const { return root + "/admin.token"; }
  std::string store() const { return root + "/store.db"; }
  std::string logs() const { return root + "/logs"; }
  std::string artifacts() const { return root + "/artifacts"; }
  std::string workspaces() const { return root + "/workspaces"; }
  std::string checkpoints() const { return checkpoint_root.empty() ? root + "/checkpoints" : checkpoint_root; }
};

// Reads a whole file; errors name the path.
Result<std::string> read_file(const std::string& path);
// Writes a file atomically (temporary file, fsync, rename) with `mode`.
Status write_file(const std::string& path, const std::string& content, unsigned mode);

}  // namespace cnlab::server
