#include "agent/gpu/health.h"

namespace cnlab::agent {

bool xid_makes_gpu_unhealthy(unsigned long long xid) {
  switch (xid) {
    case 13:   // graphics engine exception
    case 31:   // GPU memory page fault
    case 43:   // GPU stopped processing (the application's channel)
    case 45:   // preemptive cleanup, after the application was killed
    case 68:   // video decoder exception
    case 109:  // context switch timeout
      return false;
    default:
      return true;
  }
}

std::string xid_reason(unsigned long long xid) { return "XidError " + std::to_string(xid); }

}  // namespace cnlab::agent
