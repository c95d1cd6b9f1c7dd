// Which GPU faults make a GPU unhealthy, shared by both backends. Private to src/agent/gpu.
#pragma once

#include <string>

namespace cnlab::agent {

// Whether an Xid reported as critical means the GPU itself is at fault. Xids 13, 31, 43, 45, 68
// and 109 are raised by a faulty *application* (an illegal address, a kernel killed, a context
// switch timeout); the GPU keeps working for everyone else, so, as NVIDIA's Kubernetes device
// plugin does, they do not take the GPU out of service. Every other Xid, and 999 (unknown), does.
bool xid_makes_gpu_unhealthy(unsigned long long xid);

// The reason strings a GPU carries once unhealthy: "XidError 79", "EccUncorrectable".
std::string xid_reason(unsigned long long xid);
inline constexpr const char* kEccUncorrectable = "EccUncorrectable";

}  // namespace cnlab::agent
