// Our own declarations of the part of NVIDIA's NVML (libnvidia-ml.so.1) the agent calls, written
// from NVML's public API reference, because nvml.h is not installed where the agent builds: the
// library is dlopen'd at run time (nvml_backend.cpp) and may be absent. The types, constants and
// signatures follow the real C ABI; the fake in tests/fakes defines these same functions, so the
// compiler checks that the fake and the agent agree. Never include this together with nvml.h.
// Private to src/agent/gpu (and its test double).
#pragma once

namespace cnlab::agent::nvml {

extern "C" {

// A C enum: returned in a register as an int.
enum nvmlReturn_t : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999,
};

// Opaque handles: pointers owned by the library.
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlGpuInstance_st* nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st* nvmlComputeInstance_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

// nvmlDeviceGetMemoryInfo (v1 struct), in bytes.
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// Percent of the last sample period.
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlDeviceGetComputeRunningProcesses_v3 fills this (nvmlProcessInfo_v2_t in nvml.h).
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// nvmlDeviceGetProcessUtilization fills these: each process's share of a sample period, percent.
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU timestamp in microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

// nvmlMemoryErrorType_t and nvmlEccCounterType_t.
inline constexpr unsigned int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
inline constexpr unsigned int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
inline constexpr unsigned int NVML_VOLATILE_ECC = 0;
inline constexpr unsigned int NVML_AGGREGATE_ECC = 1;

inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;

// GPU instance profiles: the argument of nvmlDeviceGetGpuInstanceProfileInfo. The profile *id*
// that info returns (what nvidia-smi -lgip shows) is a different number, and is what the create and
// list calls take.
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6;
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;  // 1g+me (media engines)
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8;  // 2g+me
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9;  // 1g with twice the memory
inline constexpr unsigned int NVML_GPU_INSTANCE_PROFILE_COUNT = 0xA;

inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x8;
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0;

// Placement of a GPU instance, in memory slices: a 3g instance has size 4, a 7g instance size 8.
struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

// nvmlDeviceGetGpuInstanceProfileInfo (the v1 struct, unversioned).
struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};

// nvmlGpuInstanceGetComputeInstanceProfileInfo (the v1 struct).
struct nvmlComputeInstanceProfileInfo_t {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};

// Event types (a bit mask).
inline constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1;
inline constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2;
inline constexpr unsigned long long nvmlEventTypePState = 0x4;
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8;

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid for nvmlEventTypeXidCriticalError (999: unknown Xid)
  unsigned int gpuInstanceId;    // 0xFFFFFFFF when not attributable to a MIG instance
  unsigned int computeInstanceId;
};

// The functions the agent calls. Declared only: the agent reaches them through dlsym, using
// decltype(&name) for the pointer types, and never links against them.
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t result);

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType, unsigned int counterType,
                                         unsigned long long* eccCounts);

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t* migDevice);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info);
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t* gpuInstances,
                                       unsigned int* count);
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info);
nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t* info);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance);
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances, unsigned int* count);
nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance);

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp);

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes);
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);

}  // extern "C"

}  // namespace cnlab::agent::nvml
