#include "sim/progress_bar.h"

#include <unistd.h>

#include <string>

namespace cnlab::sim {
namespace {

constexpr auto kQuietFor = std::chrono::seconds(1);
constexpr int kWidth = 30;

}  // namespace

ProgressBar::ProgressBar(std::FILE* stream, const char* unit)
    : stream_(stream), unit_(unit), enabled_(isatty(fileno(stream)) != 0), start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(size_t done, size_t total) {
  if (!enabled_ || total == 0) return;
  auto elapsed = std::chrono::steady_clock::now() - start_;
  if (elapsed < kQuietFor) return;
  int filled = static_cast<int>(done * kWidth / total);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), ' ');
  std::fprintf(stream_, "\r[%s] %zu/%zu %s  %.1fs", bar.c_str(), done, total, unit_,
               std::chrono::duration<double>(elapsed).count());
  std::fflush(stream_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fprintf(stream_, "\r\033[K");
  std::fflush(stream_);
  drawn_ = false;
}

}  // namespace cnlab::sim
