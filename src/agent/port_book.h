// The ports of one host that troupe hands to worker groups (MASTER_PORT, AVAILABLE_PORT_LIST).
//
// Ports are never probed and released: a reserved port stays bound by the agent on the wildcard
// address (so no other process can take it on any address) until the worker that needs it
// starts (take), and stays reserved for its owner until the owner releases it, so two worker
// groups never get the same port. Simulated hosts share one kernel's ports (as may agents of
// other clusters): each reservation also holds an abstract Unix socket named after the port,
// the machine-wide claim that every troupe agent in this network namespace checks, held until
// release and dropped by the kernel if the agent dies. The range sits below the ephemeral range,
// where the kernel never picks ports by itself.
// Not thread-safe: the agent's I/O thread owns it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace troupe::agent {

class PortBook {
 public:
  explicit PortBook(std::string address) : address_(std::move(address)) {}
  ~PortBook();
  PortBook(const PortBook&) = delete;
  PortBook& operator=(const PortBook&) = delete;

  // Reserves `count` ports in [lo, hi) for `owner`, binding each one; skips ports that are
  // reserved or that some other process has bound. Throws Error(kResourceUnavailable) saying how
  // many were found, with nothing reserved.
  std::vector<int> reserve(const std::string& owner, int count, int lo, int hi);
  // Stops holding `ports` so that the starting worker can bind them; they stay reserved.
  // Called before the worker's process exists, since a worker may bind them at once.
  void take(const std::vector<int>& ports);
  // Binds taken `ports` again after the start that took them failed. A port some other process
  // bound in between stays reserved and claimed, only unguarded.
  void guard_again(const std::vector<int>& ports);
  // Releases every port of `owner`; returns how many.
  size_t release(const std::string& owner);
  size_t reserved() const { return ports_.size(); }

 private:
  struct Held {
    std::string owner;
    int fd = -1;        // the port bound on 0.0.0.0; -1 once taken
    int claim_fd = -1;  // the abstract socket "troupe-port-PORT"
  };
  static int claim_port(int port);  // the bound abstract socket, or -1 when claimed elsewhere
  static int bind_port(int port);   // a socket bound to 0.0.0.0:port, or -1
  static void close_held(Held& held);

  std::string address_;
  std::map<int, Held> ports_;
  int cursor_ = -1;
};

}  // namespace troupe::agent
