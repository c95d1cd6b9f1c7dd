// How a daemon waits for SIGINT or SIGTERM: block both before any thread starts (so none of them
// takes the signal), then wait for one on the main thread. SIGPIPE is ignored (a peer that goes
// away is an error on its socket, not the end of the process). Children start with the signals
// unblocked only if they reset their mask (the agent's shim does).
#pragma once

#include <signal.h>

namespace cnlab {

class StopSignals {
 public:
  StopSignals();
  // Blocks until SIGINT or SIGTERM arrives; returns which.
  int wait();

 private:
  sigset_t set_;
};

}  // namespace cnlab
