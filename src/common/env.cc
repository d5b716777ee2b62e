#include "common/env.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

extern char** environ;

namespace troupe::env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string get_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

std::map<std::string, std::string> current() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

std::vector<std::string> to_strings(const std::map<std::string, std::string>& vars) {
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

bool is_launcher_variable(const std::string& name) {
  for (const char* prefix : {"SLURM_", "SLURMD_", "PMI_", "PMIX_", "OMPI_", "MPI_"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

std::vector<std::string> split_list(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool valid_module_name(const std::string& name) {
  bool at_start = true;  // of an identifier
  for (char c : name) {
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (c == '.') {
      if (at_start) return false;
      at_start = true;
    } else if (letter || (digit && !at_start)) {
      at_start = false;
    } else {
      return false;
    }
  }
  return !at_start;
}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

std::string machine_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

std::string network_id() {
  char buf[128] = {};
  ssize_t n = ::readlink("/proc/self/ns/net", buf, sizeof(buf) - 1);
  return machine_id() + "/" + (n > 0 ? std::string(buf, static_cast<size_t>(n)) : "");
}

}  // namespace troupe::env
