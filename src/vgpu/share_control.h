// The standalone share controller: without an agent, one process of each tenant whose compute share
// is below 100% (or hard) runs the control law (share_controller.h) for its own tenant every second,
// in a thread of its own (share_control.cpp says why a second). It reads the GPU time each process used from NVML
// (nvmlDeviceGetProcessUtilization), finds whose processes they are in the tenant regions of the
// directory, and writes its tenant's launch pacing. Which process controls is decided by a record
// lock on the tenant region, so when it exits another takes over. With an agent the agent does this
// for all tenants and the thread is not started.
#pragma once

namespace cnlab::vgpu {

void start_share_control();
void stop_share_control();

}  // namespace cnlab::vgpu
