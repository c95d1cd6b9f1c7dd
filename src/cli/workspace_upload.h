// `cnlab run`'s workspace: the working directory packed (agent::pack_workspace: deterministic,
// honouring .gitignore and .cnlabignore) and uploaded once per content (HEAD before PUT).
#pragma once

#include <cstdint>
#include <string>

#include "cli/run_options.h"
#include "common/result.h"
#include "net/net.h"

namespace cnlab::cli {

struct UploadedWorkspace {
  WorkspaceRef ref;
  int64_t file_count = 0;
  int64_t content_bytes = 0;
  bool uploaded = false;  // false: the server already had it
  size_t skipped = 0;     // paths left out though not ignored (links leaving the directory, fifos)
};

// Packs `dir` (files up to `max_content_bytes`) and uploads it to `project` ("" : the token's
// default) unless the server already has it. kTooLarge naming "dir" when it is over the limit (the
// numbers and the biggest files in the message); errors of the server otherwise.
Result<UploadedWorkspace> upload_workspace(net::Client& api, const std::string& dir, const std::string& project,
                                           int64_t max_content_bytes);

}  // namespace cnlab::cli
