// TEST DOUBLE of libcuda.so.1 of a driver older than r570 (CUDA 12.8): cuInit and the error names,
// and no checkpoint API (cuCheckpointProcess*). Built as build/fakes/cuda-r550/libcuda.so.1, in
// its own directory, so that a test reaches it only through LD_LIBRARY_PATH; cnlab-cuda-checkpoint
// must say that such a driver is too old. Needs no CUDA headers (the few values are cuda.h's).
extern "C" {

__attribute__((visibility("default"))) int cuInit(unsigned int flags) { return flags == 0 ? 0 : 1; }  // CUDA_ERROR_INVALID_VALUE

__attribute__((visibility("default"))) int cuGetErrorName(int error, const char** name) {
  if (!name) return 1;
  *name = error == 0 ? "CUDA_SUCCESS" : error == 1 ? "CUDA_ERROR_INVALID_VALUE" : nullptr;
  return *name ? 0 : 1;
}

__attribute__((visibility("default"))) int cuGetErrorString(int error, const char** text) {
  if (!text) return 1;
  *text = error == 0 ? "no error" : error == 1 ? "invalid argument" : nullptr;
  return *text ? 0 : 1;
}

}  // extern "C"
