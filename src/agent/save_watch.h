// After a job is sent SIGUSR1 to save its own checkpoint (the application path), the agent watches
// the directory it saves into (CNLAB_CHECKPOINT_DIR) to know when to upload it. The application
// contract has no "saved" word, so the only sign is the files: the save is done once something in
// the directory changed and then nothing did for a quiet spell. A job that changes nothing within
// the checkpoint grace saved nothing; one still writing when the grace ends has what it has
// written uploaded (a later request or pre-emption takes a newer one).
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

namespace cnlab::agent {

class SaveWatch {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kWaiting, kSaved, kNothingSaved };

  // Takes the directory's state now, just before the signal.
  SaveWatch(std::filesystem::path dir, std::chrono::milliseconds grace, std::chrono::milliseconds quiet,
            Clock::time_point now);

  // Looks at the directory again. kSaved and kNothingSaved are final.
  State poll(Clock::time_point now);

  const std::filesystem::path& dir() const { return dir_; }

 private:
  // Every file's path, size and modification time: what a save changes.
  static std::string signature(const std::filesystem::path& dir);

  std::filesystem::path dir_;
  std::chrono::milliseconds grace_, quiet_;
  Clock::time_point signalled_, changed_;
  std::string signature_;
  bool saw_change_ = false;
};

}  // namespace cnlab::agent
