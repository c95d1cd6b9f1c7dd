#include "cli/workspace_upload.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/files/workspace_pack.h"

namespace cnlab::cli {
namespace {

// A file name in the temporary directory that is removed when this goes out of scope.
class TempFile {
 public:
  TempFile() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/cnlab-workspace-XXXXXX";
    int fd = ::mkstemp(pattern.data());
    if (fd >= 0) {
      ::close(fd);
      path_ = pattern;
    }
  }
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string query_project(const std::string& project) {
  return project.empty() ? "" : "?project=" + project;
}

}  // namespace

Result<UploadedWorkspace> upload_workspace(net::Client& api, const std::string& dir, const std::string& project,
                                           int64_t max_content_bytes) {
  TempFile archive;
  if (archive.path().empty()) return Error::internal("cannot create a temporary file for the workspace archive");
  agent::PackOptions options;
  options.output_path = archive.path();
  options.max_content_bytes = max_content_bytes;
  auto packed = agent::pack_workspace(dir, options);
  if (!packed) {
    Error error = packed.error();
    if (error.code == ErrorCode::kTooLarge) {
      error.message += " (the limit is --max-workspace)";
    }
    return error;
  }
  UploadedWorkspace out;
  out.ref = {packed->digest, packed->archive_bytes};
  out.file_count = packed->file_count;
  out.content_bytes = packed->content_bytes;
  out.skipped = packed->skipped.size();

  auto head = api.request("HEAD", "/v1/workspaces/" + packed->digest);
  if (!head) return head.error();
  if (head->status == 200) return out;
  if (head->status != 404) return net::error_from_response(head->status, head->body, "HEAD /v1/workspaces");

  std::ifstream in(packed->archive_path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) return Error::internal("cannot read the workspace archive " + packed->archive_path);
  auto put = api.request("PUT", "/v1/workspaces/" + packed->digest + query_project(project), bytes.str(),
                         {{"content-type", "application/octet-stream"}});
  if (!put) return put.error();
  if (put->status != 200 && put->status != 201) {
    return net::error_from_response(put->status, put->body, "uploading the workspace");
  }
  out.uploaded = true;
  return out;
}

}  // namespace cnlab::cli
