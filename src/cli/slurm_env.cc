#include "cli/slurm_env.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <sstream>

#include "common/env.h"
#include "common/process.h"
#include "troupe/error.h"

namespace troupe::cli::slurm {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

const std::string* find(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

std::optional<std::vector<int>> parse_index_list(const std::string& text) {
  std::vector<int> out;
  std::string t = trim(text);
  if (t.empty()) return out;
  std::stringstream ss(t);
  for (std::string item; std::getline(ss, item, ',');) {
    item = trim(item);
    size_t dash = item.find('-');
    if (dash != std::string::npos) {  // a range, "0-3"
      std::string lo = item.substr(0, dash), hi = item.substr(dash + 1);
      if (!all_digits(lo) || !all_digits(hi) || std::atoi(lo.c_str()) > std::atoi(hi.c_str()) ||
          std::atoi(hi.c_str()) - std::atoi(lo.c_str()) > 4096)
        return std::nullopt;
      for (int i = std::atoi(lo.c_str()); i <= std::atoi(hi.c_str()); ++i) out.push_back(i);
      continue;
    }
    if (!all_digits(item)) return std::nullopt;
    out.push_back(std::atoi(item.c_str()));
  }
  if (t.back() == ',') return std::nullopt;
  return out;
}

SlurmGpus gpus_from_env(const EnvMap& env) {
  // CUDA_VISIBLE_DEVICES: what the step's tasks see (Slurm sets it from the step's GRES).
  if (const std::string* v = find(env, "CUDA_VISIBLE_DEVICES"); v && !trim(*v).empty()) {
    std::string t = trim(*v);
    if (auto ids = parse_index_list(t)) return {*ids, "CUDA_VISIBLE_DEVICES"};
    bool uuids = t.rfind("GPU-", 0) == 0 || t.rfind("MIG-", 0) == 0 || t == "NoDevFiles";
    if (!uuids)
      throw Error(ErrorCode::kInvalidArgument,
                  "CUDA_VISIBLE_DEVICES='" + t +
                      "' is not a list of GPU indices (give --num-gpus to declare them)");
    // UUIDs name the GPUs but not their indices: the Slurm variables below do.
  }
  if (const std::string* v = find(env, "SLURM_STEP_GPUS"); v && !trim(*v).empty()) {
    auto ids = parse_index_list(*v);
    if (!ids)
      throw Error(ErrorCode::kInvalidArgument,
                  "SLURM_STEP_GPUS='" + *v + "' is not a list of GPU indices");
    return {*ids, "SLURM_STEP_GPUS"};
  }
  if (const std::string* v = find(env, "SLURM_GPUS_ON_NODE"); v && !trim(*v).empty()) {
    std::string t = trim(*v);
    if (!all_digits(t))
      throw Error(ErrorCode::kInvalidArgument, "SLURM_GPUS_ON_NODE='" + *v + "' is not a count");
    SlurmGpus g{{}, "SLURM_GPUS_ON_NODE"};
    for (int i = 0, n = std::atoi(t.c_str()); i < n; ++i) g.ids.push_back(i);
    return g;
  }
  if (find(env, "CUDA_VISIBLE_DEVICES")) return {{}, "CUDA_VISIBLE_DEVICES"};
  return {};
}

double cpus_from_env(const EnvMap& env) {
  const std::string* v = find(env, "SLURM_CPUS_ON_NODE");
  if (!v || trim(*v).empty()) return 0;
  std::string t = trim(*v);
  if (!all_digits(t) || std::atoi(t.c_str()) == 0)
    throw Error(ErrorCode::kInvalidArgument,
                "SLURM_CPUS_ON_NODE='" + *v + "' is not a positive count");
  return std::atoi(t.c_str());
}

std::string scontrol_field(const std::string& out, const std::string& key) {
  std::string needle = key + "=";
  size_t pos = 0;
  while ((pos = out.find(needle, pos)) != std::string::npos) {
    // A whole word: at the start or after white space (NodeAddr, not ActiveNodeAddr).
    if (pos == 0 || std::isspace(static_cast<unsigned char>(out[pos - 1]))) {
      size_t start = pos + needle.size();
      size_t end = start;
      while (end < out.size() && !std::isspace(static_cast<unsigned char>(out[end]))) ++end;
      std::string value = out.substr(start, end - start);
      return value == "(null)" ? std::string() : value;
    }
    pos += needle.size();
  }
  return {};
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    if (!trim(line).empty()) out.push_back(trim(line));
  return out;
}

CommandResult run_command(const std::vector<std::string>& argv, int timeout_ms) {
  int out[2];
  process::make_pipe(out);
  process::SpawnOptions o;
  o.executable = argv.at(0);
  o.args.assign(argv.begin() + 1, argv.end());
  o.env = env::to_strings(env::current());
  o.stdout_fd = out[1];
  pid_t pid;
  try {
    pid = process::spawn(o);
  } catch (...) {
    ::close(out[0]);
    ::close(out[1]);
    throw;
  }
  ::close(out[1]);
  CommandResult r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;  // the deadline is checked above
    char buf[4096];
    ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n == 0) break;
    if (n > 0) r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) process::kill_group(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out)
    throw Error(ErrorCode::kTimeout,
                "'" + argv[0] + "' did not finish within " + std::to_string(timeout_ms) + " ms");
  auto s = process::decode_wait_status(status);
  r.exit_code = s.exited ? s.code : 128 + s.signal;
  return r;
}

std::vector<std::string> expand_nodelist(const std::string& nodelist) {
  CommandResult r;
  try {
    r = run_command({"scontrol", "show", "hostnames", nodelist});
  } catch (const Error& e) {
    throw Error(e.code(), "cannot expand the node list '" + nodelist + "': " + e.message());
  }
  auto nodes = split_lines(r.output);
  if (r.exit_code != 0 || nodes.empty())
    throw Error(ErrorCode::kInvalidArgument, "`scontrol show hostnames " + nodelist +
                                                 "` failed (exit code " +
                                                 std::to_string(r.exit_code) + ")");
  return nodes;
}

std::string node_address(const std::string& node) {
  try {
    CommandResult r = run_command({"scontrol", "show", "node", node});
    if (r.exit_code != 0) return {};
    std::string addr = scontrol_field(r.output, "NodeAddr");
    return addr.empty() ? addr : resolve_ipv4(addr);
  } catch (const Error&) {
    return {};
  }
}

std::string resolve_ipv4(const std::string& name) {
  if (name.empty()) return {};
  in_addr parsed{};
  if (::inet_pton(AF_INET, name.c_str(), &parsed) == 1) return name;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0 || !found) return {};
  char text[INET_ADDRSTRLEN] = {};
  auto* in = reinterpret_cast<sockaddr_in*>(found->ai_addr);
  std::string out = ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) ? text : "";
  ::freeaddrinfo(found);
  return out;
}

}  // namespace troupe::cli::slurm
