// HostProbe, the worker class of the multi-host drivers (tests/netns/multihost_test.cc,
// tests/slurm/slurm_driver.cc): it reports where it runs and talks to its peers. Include it in
// one translation unit of a test binary (it registers the class).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "troupe/troupe.h"

namespace troupe_test {

using namespace std::chrono_literals;
using troupe::Map;
using troupe::Value;

inline std::optional<std::string> getenv_of(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

// HostProbe(): a worker that reports where it runs and talks to its peers.
//   env(name) -> getenv(name) or nil
//   echo(x) -> {"rank": RANK, "x": x}
//   sleep_ms(ms) -> "slept"
//   say(text) -> nil, after writing `text` as a line to stdout
//   digest(data) -> {"rank": RANK, "size": n, "sum": sum of data's 8-byte words (mod 2^63),
//                    "mapped": whether data's pages are a store object (/dev/shm/troupe-*)}
//   rendezvous() -> "ok": rank 0 listens on MASTER_PORT (all addresses) and takes one byte from
//                   each of the other WORLD_SIZE-1 ranks, which connect to MASTER_ADDR:MASTER_PORT
//                   (as torch.distributed's TCPStore does); anything else is the failure text
class HostProbe {
 public:
  std::optional<std::string> env(std::string name) { return getenv_of(name); }
  Value echo(Value x) {
    return Map{{"rank", std::atoi(getenv_of("RANK").value_or("-1").c_str())}, {"x", std::move(x)}};
  }
  Value digest(troupe::Bytes data) {
    uint64_t sum = 0;
    for (size_t i = 0; i + 8 <= data.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, data.data() + i, 8);
      sum += w;
    }
    bool mapped = false;
    std::ifstream maps("/proc/self/maps");
    auto a = reinterpret_cast<uintptr_t>(data.data());
    for (std::string line; std::getline(maps, line);) {
      uintptr_t lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi)
        mapped = line.find("/dev/shm/troupe-") != std::string::npos;
    }
    return Map{{"rank", std::atoi(getenv_of("RANK").value_or("-1").c_str())},
               {"size", static_cast<int64_t>(data.size())},
               {"sum", static_cast<int64_t>(sum >> 1)},
               {"mapped", mapped}};
  }
  std::string sleep_ms(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return "slept";
  }
  Value say(std::string text) {
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
    return Value();
  }
  std::string rendezvous() {
    int rank = std::atoi(getenv_of("RANK").value_or("-1").c_str());
    int world = std::atoi(getenv_of("WORLD_SIZE").value_or("0").c_str());
    int port = std::atoi(getenv_of("MASTER_PORT").value_or("0").c_str());
    std::string master = getenv_of("MASTER_ADDR").value_or("");
    auto deadline = std::chrono::steady_clock::now() + 20s;
    if (rank == 0) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
          ::listen(fd, 16) != 0) {
        ::close(fd);
        return "rank 0 cannot listen on port " + std::to_string(port);
      }
      for (int got = 0; got < world - 1; ++got) {
        int c = ::accept(fd, nullptr, nullptr);
        char b = 0;
        if (c < 0 || ::read(c, &b, 1) != 1) {
          ::close(fd);
          return "rank 0: accept/read failed after " + std::to_string(got) + " peers";
        }
        ::close(c);
      }
      ::close(fd);
      return "ok";
    }
    while (std::chrono::steady_clock::now() < deadline) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      ::inet_pton(AF_INET, master.c_str(), &addr.sin_addr);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
        char b = static_cast<char>(rank);
        bool sent = ::write(fd, &b, 1) == 1;
        ::close(fd);
        return sent ? "ok" : "write failed";
      }
      ::close(fd);
      std::this_thread::sleep_for(50ms);  // rank 0 is not listening yet
    }
    return "rank " + std::to_string(rank) + " could not reach " + master + ":" +
           std::to_string(port);
  }
};

}  // namespace troupe_test

TROUPE_WORKER_CLASS_NAMED(troupe_test::HostProbe, "HostProbe", cls) {
  cls.method("env", &troupe_test::HostProbe::env, {"name"});
  cls.method("echo", &troupe_test::HostProbe::echo, {"x"});
  cls.method("sleep_ms", &troupe_test::HostProbe::sleep_ms, {"ms"});
  cls.method("digest", &troupe_test::HostProbe::digest, {"data"});
  cls.method("say", &troupe_test::HostProbe::say, {"text"});
  cls.method("rendezvous", &troupe_test::HostProbe::rendezvous, {});
}
