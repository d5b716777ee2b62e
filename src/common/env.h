// Environment helpers: reading variables and building child environments.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe::env {

std::optional<std::string> get(const char* name);
std::string get_or(const char* name, const std::string& fallback);
// This process's environment as a map.
std::map<std::string, std::string> current();
// "KEY=VALUE" strings for execve, in key order.
std::vector<std::string> to_strings(const std::map<std::string, std::string>& vars);
// True for variables of launchers that must not leak into workers (SLURM_*, SLURMD_* such as
// SLURMD_NODENAME, which names the driver's node, PMI_*, PMIX_*, OMPI_*, MPI_*).
bool is_launcher_variable(const std::string& name);
// The non-empty parts of `text` between `sep`s.
std::vector<std::string> split_list(const std::string& text, char sep);
// A dotted Python module name ("numpy", "pkg.sub_mod"): ASCII identifiers joined by dots.
bool valid_module_name(const std::string& name);
// The absolute path of the running executable (/proc/self/exe).
std::string self_executable();
// Identifies this machine's boot (/proc/sys/kernel/random/boot_id): processes with the same id
// share a kernel, so Unix sockets and process groups are reachable between them.
std::string machine_id();
// Identifies this machine's boot and network namespace: processes with the same id reach each
// other's Unix sockets and see the same addresses (a network namespace is a host of its own in
// multi-host tests).
std::string network_id();

}  // namespace troupe::env
