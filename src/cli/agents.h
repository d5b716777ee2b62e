// The agents of a running cluster's hosts, asked from the command line (`troupe status`,
// `troupe logs`) and by the head's dashboard (dashboard.h).
//
// Every agent is connected to at once, with one deadline for all connections, then asked at
// once, with one deadline for all answers: an agent that does not connect or answer in time
// (stopped, overloaded, cut off) is reported as not answering, never waited for longer. Blocking;
// one thread at a time. Owns an I/O thread and one connection per agent, closed on destruction.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/io_loop.h"
#include "transport/rpc_peer.h"
#include "troupe/value.h"

namespace troupe::cli {

// How long the command line waits for the agents' connections, then for their answers.
constexpr std::chrono::milliseconds kAgentConnectDeadline{500};
constexpr std::chrono::milliseconds kAgentAnswerDeadline{500};

struct AgentHost {
  std::string name;
  std::string endpoint;  // "tcp:HOST:PORT"; empty when the head has none
  bool head_says_up = false;
};

// The hosts in a head's status answer ({"hosts": [{name, tcp_endpoint, alive}, ...]}).
std::vector<AgentHost> hosts_of(const Value& head_status);

class Agents {
 public:
  struct Call {
    std::string method;
    Map kwargs;
  };
  // A call's answer, or why there is none (`error`: the host is lost, the agent did not connect
  // or answer in time, or it answered with an error).
  struct Answer {
    std::optional<Value> value;
    std::string error;
  };

  // Connects to the agent of every host the head says is up, all at once, waiting at most
  // until `deadline` (usually now + kAgentConnectDeadline).
  Agents(std::vector<AgentHost> hosts, const std::string& token, Clock::time_point deadline);
  ~Agents();
  Agents(const Agents&) = delete;
  Agents& operator=(const Agents&) = delete;

  const std::vector<AgentHost>& hosts() const { return hosts_; }
  // Sends every call to every host's agent at once; waits at most until `deadline` (usually
  // now + kAgentAnswerDeadline).
  // answers[host][call], in the order of hosts() and `calls`.
  std::vector<std::vector<Answer>> ask_all(const std::vector<Call>& calls,
                                           Clock::time_point deadline);
  // calls[host] (any number, possibly none) to each host's agent, all at once; waits at most
  // until `deadline`. answers[host][i], in the order of hosts() and calls[host].
  std::vector<std::vector<Answer>> ask_lists(const std::vector<std::vector<Call>>& calls,
                                             Clock::time_point deadline);
  // calls[host] to each host's agent (none where it is nullopt), all at once; waits at most
  // until `deadline`. answers[host], in the order of hosts().
  std::vector<Answer> ask_each(const std::vector<std::optional<Call>>& calls,
                               Clock::time_point deadline);
  // One call to one host's agent, waiting at most until `deadline`. Throws Error naming the
  // host: its error, or kTimeout when it did not answer in time.
  Value ask(size_t host, const Call& call, Clock::time_point deadline);

 private:
  std::optional<Future<Value>> send(size_t host, const Call& call, std::string& error);
  std::string late(size_t host, const char* what, Clock::time_point since) const;

  transport::IoLoop loop_;
  std::vector<AgentHost> hosts_;
  std::vector<std::shared_ptr<transport::RpcPeer>> peers_;  // null: see errors_
  std::vector<std::string> errors_;
};

}  // namespace troupe::cli
