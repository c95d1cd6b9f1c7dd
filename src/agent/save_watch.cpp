#include "agent/save_watch.h"

#include <sys/stat.h>

#include <fmt/format.h>

namespace cnlab::agent {

namespace fs = std::filesystem;

SaveWatch::SaveWatch(fs::path dir, std::chrono::milliseconds grace, std::chrono::milliseconds quiet,
                     Clock::time_point now)
    : dir_(std::move(dir)), grace_(grace), quiet_(quiet), signalled_(now), changed_(now), signature_(signature(dir_)) {}

SaveWatch::State SaveWatch::poll(Clock::time_point now) {
  if (std::string current = signature(dir_); current != signature_) {
    signature_ = std::move(current);
    saw_change_ = true;
    changed_ = now;
  }
  const bool grace_over = now - signalled_ >= grace_;
  if (saw_change_ && (now - changed_ >= quiet_ || grace_over)) return State::kSaved;
  return grace_over && !saw_change_ ? State::kNothingSaved : State::kWaiting;
}

std::string SaveWatch::signature(const fs::path& dir) {
  std::string text;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    // lstat: a link the job left is recorded as itself, never followed out of the directory.
    if (::lstat(it->path().c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    text += fmt::format("{}\t{}\t{}.{}\n", it->path().lexically_relative(dir).string(), st.st_size,
                        st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  }
  return text;
}

}  // namespace cnlab::agent
