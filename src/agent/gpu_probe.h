// Reads GPU state through NVML, loaded at run time (dlopen of libnvidia-ml.so.1), without
// creating a CUDA context on the GPU. Thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace troupe::agent {

// One line per GPU id: name, memory used/total, utilisation; or one line saying NVML is
// unavailable on this host (and why). Never throws.
std::vector<std::string> read_gpu_state(const std::vector<int>& gpu_ids);

// The number of GPUs NVML sees on this host, or nullopt when NVML is unavailable. Never throws.
std::optional<int> nvml_gpu_count();

}  // namespace troupe::agent
