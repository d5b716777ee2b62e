#include "agent/gpu_probe.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>

namespace troupe::agent {
namespace {

// The subset of NVML's C API used here (nvml.h, stable ABI).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};

struct Nvml {
  void* lib = nullptr;
  std::string error;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
};

const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    n.lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n.lib) {
      const char* e = ::dlerror();
      n.error = e ? e : "libnvidia-ml.so.1 not found";
      return;
    }
    auto sym = [&](const char* s) { return ::dlsym(n.lib, s); };
    n.init = reinterpret_cast<decltype(n.init)>(sym("nvmlInit_v2"));
    n.handle_by_index =
        reinterpret_cast<decltype(n.handle_by_index)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    n.memory_info = reinterpret_cast<decltype(n.memory_info)>(sym("nvmlDeviceGetMemoryInfo"));
    n.utilization = reinterpret_cast<decltype(n.utilization)>(sym("nvmlDeviceGetUtilizationRates"));
    n.name = reinterpret_cast<decltype(n.name)>(sym("nvmlDeviceGetName"));
    n.device_count = reinterpret_cast<decltype(n.device_count)>(sym("nvmlDeviceGetCount_v2"));
    if (!n.init || !n.handle_by_index || !n.memory_info || !n.utilization || !n.name ||
        !n.device_count) {
      n.error = "libnvidia-ml.so.1 lacks the expected symbols";
      return;
    }
    if (int rc = n.init(); rc != 0) n.error = "nvmlInit failed with code " + std::to_string(rc);
  });
  return n;
}

}  // namespace

std::optional<int> nvml_gpu_count() {
  const Nvml& n = nvml();
  unsigned int count = 0;
  if (!n.error.empty() || n.device_count(&count) != 0) return std::nullopt;
  return static_cast<int>(count);
}

std::vector<std::string> read_gpu_state(const std::vector<int>& gpu_ids) {
  const Nvml& n = nvml();
  if (!n.error.empty()) return {"NVML is unavailable on this host: " + n.error};
  unsigned int count = 0;
  n.device_count(&count);
  std::vector<std::string> out;
  for (int id : gpu_ids) {
    nvmlDevice_t dev = nullptr;
    if (id < 0 || static_cast<unsigned>(id) >= count || n.handle_by_index(id, &dev) != 0) {
      out.push_back("GPU " + std::to_string(id) + ": not present (this host has " +
                    std::to_string(count) + " GPUs)");
      continue;
    }
    char name[96] = "?";
    n.name(dev, name, sizeof(name));
    nvmlMemory_t mem{};
    nvmlUtilization_t util{};
    bool have_mem = n.memory_info(dev, &mem) == 0;
    bool have_util = n.utilization(dev, &util) == 0;
    char line[256];
    std::snprintf(line, sizeof(line), "GPU %d (%s): memory %.0f/%.0f MiB used, utilization %s", id,
                  name, have_mem ? mem.used / 1048576.0 : 0.0,
                  have_mem ? mem.total / 1048576.0 : 0.0,
                  have_util ? (std::to_string(util.gpu) + "%").c_str() : "unknown");
    out.push_back(line);
  }
  return out;
}

}  // namespace troupe::agent
