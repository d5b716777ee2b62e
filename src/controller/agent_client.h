// How the controller reaches the agent of one host: the typed requests of wire/control.h and the
// agent's events. One implementation, over an RpcPeer (connect_agent), serves both the embedded
// cluster (agents are child processes of the driver, reached over Unix sockets) and a standing
// cluster (Unix sockets on the same network, TCP across hosts). Unit tests of the controller use
// FakeAgentClient (tests/fake_agent_client.h) through an AgentConnector.
//
// Threads: every request function may be called from any thread and never blocks: it returns an
// AgentReply at once; after close() or a lost connection the reply fails with the reason.
// Event and close callbacks run on the I/O thread (a fake's: on the thread that triggers them),
// must be quick and must not block.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/io_loop.h"
#include "troupe/future.h"
#include "wire/control.h"
#include "wire/head_protocol.h"

namespace troupe::internal {

// The answer to one agent request: the raw reply, decoded with the message's typed decoder when
// read. Cheap to copy.
template <typename R>
class AgentReply {
 public:
  using Decoder = R (*)(const Value&);
  AgentReply(Future<Value> raw, Decoder decode) : raw_(std::move(raw)), decode_(decode) {}

  // Blocks at most `timeout`. Returns the decoded reply; throws the request's Error,
  // Error(kTimeout), or the decoder's Error(kInvalidArgument) naming the message and field.
  R get(std::chrono::milliseconds timeout) const { return decode_(raw_.get(timeout)); }
  // Blocks until the answer is there or `deadline`; returns whether it is.
  bool wait_until(Clock::time_point deadline) const { return raw_.wait_until(deadline); }
  // Calls `callback` once: with the error (the request's or the decoder's) and a default R, or
  // with null and the decoded reply. Runs now when the answer is there, else on the thread that
  // completes it (the I/O thread); it must not block.
  void then(std::function<void(const Error* error, R reply)> callback) const {
    Decoder decode = decode_;
    raw_.then([decode, cb = std::move(callback)](const Future<Value>& f) {
      if (auto e = f.error()) return cb(&*e, R{});
      R reply;
      try {
        reply = decode(f.get());
      } catch (const Error& e) {
        return cb(&e, R{});
      }
      cb(nullptr, std::move(reply));
    });
  }
  const Future<Value>& raw() const { return raw_; }

 private:
  Future<Value> raw_;
  Decoder decode_;
};

class AgentClient {
 public:
  virtual ~AgentClient() = default;

  // Starts a worker process; `context` names the request in errors ("start of worker 'w-0'").
  virtual AgentReply<wire::control::StartWorkerReply> start_worker(
      const wire::control::StartWorker& request, std::string context) = 0;
  // Stops a worker (SIGTERM to its process group, SIGKILL after the grace); the reply comes
  // once it is gone.
  virtual AgentReply<wire::control::StopWorkerReply> stop_worker(
      const wire::control::StopWorker& request) = 0;
  // Binds and holds `count` ports for `owner`; the reply lists them.
  virtual AgentReply<std::vector<int>> reserve_ports(
      const wire::control::ReservePorts& request) = 0;
  // Frees the ports held for `owner`; the reply says how many.
  virtual AgentReply<int64_t> release_ports(const wire::control::ReleasePorts& request) = 0;
  // One line of state per GPU.
  virtual AgentReply<std::vector<std::string>> gpu_state(
      const wire::control::GpuState& request) = 0;
  virtual AgentReply<wire::control::MemoryReply> memory() = 0;
  // The stacks of running workers (wire/control.h DumpStacks); answered within its deadline.
  virtual AgentReply<wire::control::DumpStacksReply> dump_stacks(
      const wire::control::DumpStacks& request) = 0;
  // Object store (store/host_store.h): room for an object of `size` bytes, answered with its
  // name or Error(kOutOfMemory); the end of an object's account (its file is removed); usage.
  virtual AgentReply<std::string> store_reserve(int64_t size) = 0;
  virtual AgentReply<Value> store_free(const std::string& name) = 0;
  // Sends `data` for the agent to keep as an object of its host; the reply is its name.
  virtual AgentReply<std::string> store_put(const Bytes& data) = 0;
  virtual AgentReply<wire::control::StoreUsage> store_usage() = 0;
  // Asks the agent to stop every worker and exit (embedded cluster only: a standing agent serves
  // other drivers).
  virtual AgentReply<Value> shutdown() = 0;

  // Closes the connection: pending replies fail with `reason`, then the close callback runs
  // (asynchronously for the RpcPeer implementation). Idempotent.
  virtual void close(const Error& reason) = 0;
  virtual bool closed() const = 0;
  // The other end, for messages (e.g. "unix:/tmp/.../agent-0.sock").
  virtual std::string endpoint() const = 0;
  // When the agent was last heard from (any bytes). On the I/O thread only.
  virtual std::chrono::steady_clock::time_point last_heard() const = 0;
};

// What an agent tells the controller. Every callback is optional.
struct AgentEvents {
  std::function<void(wire::control::WorkerExited&& exited)> on_worker_exited;
  std::function<void(wire::control::WorkerLog&& log)> on_worker_log;
  // The connection is gone, after every pending reply failed with `reason`; called once, with
  // the client whose connection it was (to tell an old connection from a newer one).
  std::function<void(const AgentClient* client, const Error& reason)> on_closed;
};

// How ClusterImpl reaches the agent of a host: opens a connection to `endpoint` (blocking, at
// most the connect timeout) and returns a client delivering `events`; throws Error when the agent
// cannot be reached. Heartbeats: when `heartbeat_timeout` is non-zero the client monitors the
// agent (transport RPC-HB) and closes with Error(kTimeout) when it stops answering.
struct AgentConnectOptions {
  std::string endpoint;
  std::string token;
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds heartbeat_interval{0};
  std::chrono::milliseconds heartbeat_timeout{0};  // 0: no heartbeats
};
using AgentConnector = std::function<std::shared_ptr<AgentClient>(
    size_t host, const AgentConnectOptions& options, AgentEvents events)>;

// The real connector: an authenticated transport connection on `loop`, which must outlive every
// client it makes. Must not be called on the loop's thread.
AgentConnector make_agent_connector(transport::IoLoop& loop);

}  // namespace troupe::internal
