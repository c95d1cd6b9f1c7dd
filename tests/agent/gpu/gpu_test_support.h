// Helpers shared by the GPU tests: a log capture, a temporary directory, and a handle on the fake
// NVML (tests/fakes/fake_nvml.cpp) with its test controls.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "agent/gpu/nvml_backend.h"

namespace cnlab::agent::testing {

// Collects what is logged while it lives (every level), one formatted line per event.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)), previous_(spdlog::default_logger()) {
    sink_->set_pattern("%l %v");
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::vector<std::string> lines() const { return sink_->last_formatted(); }
  // Lines containing `text`.
  std::vector<std::string> matching(const std::string& text) const {
    std::vector<std::string> out;
    for (auto& line : lines()) {
      if (line.find(text) != std::string::npos) out.push_back(line);
    }
    return out;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("cnlab-gpu-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    auto p = path_ / name;
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// Points FAKE_NVML_CONFIG at `config` and holds the fake loaded, so that its call counters span
// the backends a test opens. The fake's GPU state lives from a backend's nvmlInit to its shutdown.
class FakeNvml {
 public:
  explicit FakeNvml(const std::string& config) {
    auto path = dir_.write("fake_nvml.conf", config);
    ::setenv("FAKE_NVML_CONFIG", path.c_str(), 1);
    handle_ = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) ADD_FAILURE() << "cannot load the fake NVML at " << FAKE_NVML_PATH << ": " << dlerror();
  }
  ~FakeNvml() {
    ::unsetenv("FAKE_NVML_CONFIG");
    if (handle_) dlclose(handle_);
  }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;

  std::unique_ptr<NvmlBackend> open() const { return NvmlBackend::open({.library = FAKE_NVML_PATH}); }

  int calls(const char* function) const { return control<int(const char*)>("fake_nvml_call_count")(function); }
  // The calls that read or change MIG instances, together.
  int mig_calls() const {
    return calls("nvmlDeviceGetGpuInstances") + calls("nvmlDeviceCreateGpuInstanceWithPlacement") +
           calls("nvmlGpuInstanceDestroy") + calls("nvmlGpuInstanceCreateComputeInstance") +
           calls("nvmlComputeInstanceDestroy");
  }
  void inject_xid(unsigned gpu, unsigned long long xid) const {
    ASSERT_EQ(control<int(unsigned, unsigned long long)>("fake_nvml_inject_xid")(gpu, xid), 0);
  }
  void inject_double_bit_ecc(unsigned gpu) const {
    ASSERT_EQ(control<int(unsigned)>("fake_nvml_inject_double_bit_ecc")(gpu), 0);
  }
  void set_ecc_count(unsigned gpu, long long count) const {
    ASSERT_EQ(control<int(unsigned, long long)>("fake_nvml_set_ecc_count")(gpu, count), 0);
  }
  void set_processes(unsigned gpu, int count) const {
    ASSERT_EQ(control<int(unsigned, int)>("fake_nvml_set_processes")(gpu, count), 0);
  }
  // The fake's own view of GPU `gpu`'s instances: "9@0/1,14@4/1" (profile id @ start / CIs).
  std::string mig(unsigned gpu) const {
    char buffer[256] = {};
    if (control<int(unsigned, char*, unsigned)>("fake_nvml_describe_mig")(gpu, buffer, sizeof buffer) != 0) {
      return "<not initialized>";
    }
    return buffer;
  }

 private:
  template <typename F>
  F* control(const char* name) const {
    void* symbol = handle_ ? dlsym(handle_, name) : nullptr;
    if (!symbol) {
      ADD_FAILURE() << "the fake NVML lacks " << name;
      std::abort();
    }
    return reinterpret_cast<F*>(symbol);
  }

  TempDir dir_;
  void* handle_ = nullptr;
};

}  // namespace cnlab::agent::testing
