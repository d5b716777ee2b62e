#include "agent/port_book.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "troupe/error.h"

namespace troupe::agent {

PortBook::~PortBook() {
  for (auto& [port, held] : ports_)
    if (held.fd >= 0) ::close(held.fd);
}

int PortBook::bind_port(int port) const {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address_.c_str(), &addr.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
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
  std::vector<std::pair<int, int>> got;  // port, fd
  for (int tried = 0; tried < hi - lo && static_cast<int>(got.size()) < count; ++tried) {
    int port = cursor_;
    cursor_ = cursor_ + 1 >= hi ? lo : cursor_ + 1;
    if (ports_.count(port)) continue;
    int fd = bind_port(port);
    if (fd >= 0) got.emplace_back(port, fd);
  }
  if (static_cast<int>(got.size()) < count) {
    for (auto& [port, fd] : got) ::close(fd);
    throw Error(ErrorCode::kResourceUnavailable,
                "only " + std::to_string(got.size()) + " of " + std::to_string(count) +
                    " ports free in [" + std::to_string(lo) + ", " + std::to_string(hi) + ") on " +
                    address_ + " (" + std::to_string(ports_.size()) + " reserved by troupe)");
  }
  std::vector<int> out;
  for (auto& [port, fd] : got) {
    ports_[port] = Held{owner, fd};
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

size_t PortBook::release(const std::string& owner) {
  size_t n = 0;
  for (auto it = ports_.begin(); it != ports_.end();) {
    if (it->second.owner != owner) {
      ++it;
      continue;
    }
    if (it->second.fd >= 0) ::close(it->second.fd);
    it = ports_.erase(it);
    ++n;
  }
  return n;
}

}  // namespace troupe::agent
