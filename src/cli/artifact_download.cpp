#include "cli/artifact_download.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "agent/files/digest.h"
#include "common/json_reader.h"
#include "common/strings.h"

namespace cnlab::cli {
namespace {

namespace fs = std::filesystem;

std::string encode_path(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// Downloads one artifact into `target`, through a temporary file beside it.
Status download_one(net::Client& api, const std::string& job, const std::string& path, const std::string& sha256,
                    const fs::path& target) {
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) return Error::internal("cannot create " + target.parent_path().string() + ": " + ec.message());
  std::string temp = target.string() + ".cnlab-partial";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Error::internal("cannot write " + temp + ": " + std::strerror(errno));
  bool write_failed = false;
  std::string error_body;
  auto streamed = api.stream("GET", "/v1/jobs/" + job + "/artifacts/" + encode_path(path), [&](std::string_view chunk) {
    if (error_body.size() < 65536) error_body.append(chunk.substr(0, 65536));
    size_t done = 0;
    while (done < chunk.size()) {
      ssize_t n = ::write(fd, chunk.data() + done, chunk.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        write_failed = true;
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  });
  bool synced = ::fsync(fd) == 0;
  ::close(fd);
  auto fail = [&](Error error) {
    ::unlink(temp.c_str());
    return error;
  };
  if (!streamed) return fail(streamed.error());
  if (*streamed != 200) return fail(net::error_from_response(*streamed, error_body, ""));
  if (write_failed || !synced) return fail(Error::internal("cannot write " + temp + ": " + std::strerror(errno)));
  if (auto checked = agent::verify_digest(temp, "sha256:" + sha256); !checked) {
    return fail(Error::internal("the download does not match the server's listing: " + checked.error().message));
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    return fail(Error::internal("cannot rename " + temp + " to " + target.string() + ": " + std::strerror(errno)));
  }
  return Status::ok();
}

}  // namespace

bool safe_artifact_path(const std::string& path) {
  if (path.empty() || path.size() > 4096 || path.front() == '/') return false;
  if (path.find('\0') != std::string::npos || path.find('\\') != std::string::npos) return false;
  auto segments = split(path, '/');
  if (segments.size() > 32) return false;
  for (auto segment : segments) {
    if (segment.empty() || segment == "." || segment == "..") return false;
  }
  return true;
}

Result<DownloadedArtifacts> download_artifacts(net::Client& api, const std::string& job, const std::string& dir) {
  auto listed = api.request("GET", "/v1/jobs/" + job + "/artifacts");
  if (!listed) return listed.error();
  if (listed->status != 200) return net::error_from_response(listed->status, listed->body, "listing the artifacts");
  Json listing = Json::parse(listed->body, nullptr, false);
  if (!listing.is_object() || !listing.contains("items") || !listing["items"].is_array()) {
    return Error::internal("the server's artifact listing is not {\"items\": [...]}");
  }
  DownloadedArtifacts out;
  out.dir = dir;
  for (const auto& item : listing["items"]) {
    std::string path = item.value("path", "");
    std::string sha256 = item.value("sha256", "");
    if (!safe_artifact_path(path)) {
      out.problems.push_back("\"" + path + "\": not written: the path is not relative or has a \".\" or \"..\" segment");
      continue;
    }
    if (sha256.size() != 64) {
      out.problems.push_back(path + ": not written: the listing has no SHA-256 for it");
      continue;
    }
    if (auto done = download_one(api, job, path, sha256, fs::path(dir) / path); !done) {
      out.problems.push_back(path + ": " + done.error().to_string());
      continue;
    }
    ++out.files;
    out.bytes += item.value("size_bytes", int64_t{0});
  }
  return out;
}

}  // namespace cnlab::cli
