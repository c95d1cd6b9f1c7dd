// The few NVML (libnvidia-ml.so.1) declarations the interception library needs, written from NVML's
// public API reference (nvml.h is not installed where CNLab builds). Types and function types only,
// in a namespace; the hooks are defined with C linkage under the real names (memory_info.cpp).
// tests/vgpu/cuda_api_check.cpp checks them against the agent's fuller declarations.
#pragma once

namespace cnlab::vgpu::nvml {

using nvmlReturn_t = int;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;

using nvmlDevice_t = struct nvmlDevice_st*;
inline constexpr unsigned int kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct nvmlMemory_t {  // v1, bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlMemory_v2_t {
  unsigned int version;  // nvmlMemory_v2 = sizeof | 2 << 24
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
inline constexpr unsigned int kMemoryV2Version = static_cast<unsigned int>(sizeof(nvmlMemory_v2_t)) | (2u << 24);

// nvmlDeviceGetProcessUtilization's samples (percent over the sample period).
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;  // microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

using nvmlInit_v2_t = nvmlReturn_t();
using nvmlDeviceGetUUID_t = nvmlReturn_t(nvmlDevice_t device, char* uuid, unsigned int length);
using nvmlDeviceGetMemoryInfo_t = nvmlReturn_t(nvmlDevice_t device, nvmlMemory_t* memory);
using nvmlDeviceGetMemoryInfo_v2_t = nvmlReturn_t(nvmlDevice_t device, nvmlMemory_v2_t* memory);
using nvmlDeviceGetHandleByUUID_t = nvmlReturn_t(const char* uuid, nvmlDevice_t* device);
using nvmlDeviceGetProcessUtilization_t = nvmlReturn_t(nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples,
                                                       unsigned int* count, unsigned long long lastSeenTimeStamp);

}  // namespace cnlab::vgpu::nvml
