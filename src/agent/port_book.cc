#include "agent/port_book.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "troupe/error.h"

namespace troupe::agent {

PortBook::~PortBook() {
  for (auto& [port, held] : ports_) close_held(held);
}

void PortBook::close_held(Held& held) {
  if (held.fd >= 0) ::close(held.fd);
  if (held.claim_fd >= 0) ::close(held.claim_fd);
  held.fd = held.claim_fd = -1;
}

int PortBook::claim_port(int port) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract name (leading NUL): unique per network namespace, gone when its holder dies.
  std::string name = "troupe-port-" + std::to_string(port);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int PortBook::bind_port(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);  // free on every address, as a wildcard binder needs
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::vector<int> PortBook::reserve(const std::string& owner, int count, int lo, int hi) {
  if (lo <= 0 || hi > 65536 || lo >= hi || count <= 0)
    throw Error(ErrorCode::kInvalidArgument, "bad port request: " + std::to_string(count) +
                                                 " ports in [" + std::to_string(lo) + ", " +
                                                 std::to_string(hi) + ")");
  if (cursor_ < lo || cursor_ >= hi) cursor_ = lo;
  std::vector<std::pair<int, Held>> got;
  for (int tried = 0; tried < hi - lo && static_cast<int>(got.size()) < count; ++tried) {
    int port = cursor_;
    cursor_ = cursor_ + 1 >= hi ? lo : cursor_ + 1;
    if (ports_.count(port)) continue;
    Held held{owner, -1, claim_port(port)};
    if (held.claim_fd < 0) continue;  // another troupe agent on this kernel has it
    held.fd = bind_port(port);
    if (held.fd < 0) {
      close_held(held);  // some other process has it
      continue;
    }
    got.emplace_back(port, held);
  }
  if (static_cast<int>(got.size()) < count) {
    for (auto& [port, held] : got) close_held(held);
    throw Error(ErrorCode::kResourceUnavailable,
                "only " + std::to_string(got.size()) + " of " + std::to_string(count) +
                    " ports free in [" + std::to_string(lo) + ", " + std::to_string(hi) + ") on " +
                    address_ + " (" + std::to_string(ports_.size()) + " reserved by troupe)");
  }
  std::vector<int> out;
  for (auto& [port, held] : got) {
    ports_[port] = held;
    out.push_back(port);
  }
  return out;
}

void PortBook::take(const std::vector<int>& ports) {
  for (int port : ports) {
    auto it = ports_.find(port);
    if (it == ports_.end() || it->second.fd < 0) continue;
    ::close(it->second.fd);
    it->second.fd = -1;
  }
}

void PortBook::guard_again(const std::vector<int>& ports) {
  for (int port : ports) {
    auto it = ports_.find(port);
    if (it != ports_.end() && it->second.fd < 0) it->second.fd = bind_port(port);
  }
}

size_t PortBook::release(const std::string& owner) {
  size_t n = 0;
  for (auto it = ports_.begin(); it != ports_.end();) {
    if (it->second.owner != owner) {
      ++it;
      continue;
    }
    close_held(it->second);
    it = ports_.erase(it);
    ++n;
  }
  return n;
}

}  // namespace troupe::agent
