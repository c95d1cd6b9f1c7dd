#include "common/stop_signals.h"

#include <pthread.h>

namespace cnlab {

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

int StopSignals::wait() {
  int received = 0;
  sigwait(&set_, &received);
  return received;
}

}  // namespace cnlab
