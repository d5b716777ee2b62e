// The messages between an agent and its fork server (fork_server.h), over a Unix stream
// socketpair. Encoding only, no I/O.
//
//   fork server -> agent, once at start-up: int32 hello (kHelloOk, or why it will not serve;
//     then it may send up to kMaxRefusal bytes of text saying why, and closes the socket).
//   agent -> fork server, per worker: Header with `nfds` descriptors attached (SCM_RIGHTS:
//     stdout, stderr, ready pipe, token pipe, and the worker's cgroup.procs when it has a cgroup
//     to join, containment.h), then `body_len` bytes: strings, each a uint32
//     length and its bytes: the cwd, then the environment's "KEY=VALUE" entries.
//   fork server -> agent, per worker: int32, the worker's pid, or -errno.
// Both ends run on one machine and one build: native byte order.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace troupe::agent::fork_protocol {

constexpr uint32_t kMagic = 0x32534654;  // "TFS2"
constexpr int kNumFds = 4;               // always sent
constexpr int kMaxFds = 5;               // with the cgroup.procs
constexpr uint32_t kMaxBody = 4u << 20;
constexpr size_t kMaxRefusal = 4096;
// The width of the fork server's placeholder for a worker's container marker (containment.h).
constexpr size_t kMarkerRoom = 40;
constexpr int32_t kHelloOk = 0;
constexpr int32_t kHelloThreads = 1;  // it is not single-threaded (FS-1)
constexpr int32_t kHelloBadSetup = 2;

struct Header {
  uint32_t magic;
  uint32_t umask;
  uint32_t body_len;
  uint32_t nfds;  // kNumFds or kMaxFds
};

inline std::string encode_strings(const std::string& first, const std::vector<std::string>& rest) {
  std::string out;
  auto put = [&out](const std::string& s) {
    uint32_t n = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out.append(s);
  };
  put(first);
  for (const auto& s : rest) put(s);
  return out;
}

// Decodes what encode_strings wrote; false when `data` is malformed.
inline bool decode_strings(const std::string& data, std::vector<std::string>* out) {
  size_t pos = 0;
  while (pos < data.size()) {
    uint32_t n = 0;
    if (data.size() - pos < sizeof(n)) return false;
    std::memcpy(&n, data.data() + pos, sizeof(n));
    pos += sizeof(n);
    if (data.size() - pos < n) return false;
    out->emplace_back(data, pos, n);
    pos += n;
  }
  return !out->empty();
}

}  // namespace troupe::agent::fork_protocol
