// The control protocol between driver, head and agents: one typed message per request, reply
// and event, defined here once. Each converts to the Map (or Value) that travels as a request's
// kwargs, a response's value or an event's value (rpc_message.h), and back. Decoding checks
// every field: a missing required field or a value of the wrong type is Error(kInvalidArgument)
// "METHOD: field 'F': ..."; unknown fields are ignored (a newer peer may send more).
//
// Agent requests (driver -> agent): start_worker, stop_worker, reserve_ports, release_ports,
// gpu_state, memory, shutdown, dump_stacks (and list_workers, ping, read_log, which only tools
// send). Agent
// events (agent
// -> driver, head): worker_exited. Head requests (agent -> head): register_agent; (CLI -> head):
// status.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/value.h"

namespace troupe::wire::control {

// Reads the fields of one message; errors name the message and the field.
class FieldReader {
 public:
  FieldReader(std::string message, const Value& value);
  template <typename T>
  T required(const char* key) const {
    const Value* v = map_.find(key);
    if (!v) throw missing(key);
    return convert<T>(key, *v);
  }
  template <typename T>
  T optional(const char* key, T fallback) const {
    const Value* v = map_.find(key);
    if (!v || v->is_nil()) return fallback;
    return convert<T>(key, *v);
  }

 private:
  template <typename T>
  T convert(const char* key, const Value& v) const {
    try {
      return v.as<T>();
    } catch (const Error& e) {
      throw bad_field(key, e.message());
    }
  }
  Error missing(const char* key) const;
  Error bad_field(const char* key, const std::string& why) const;
  std::string message_;
  Value map_;
};

// ---- agent requests ------------------------------------------------------------------------

struct StartWorker {
  static constexpr const char* kMethod = "start_worker";
  std::string name;
  std::vector<int> gpus;             // GPU ids for CUDA_VISIBLE_DEVICES, or:
  int num_gpus = 0;                  // this many GPUs no other worker uses, chosen by the agent
  std::vector<std::string> wrapper;  // launch wrapper command prefix
  std::vector<int> take_ports;       // reserved ports the agent stops holding before the start
  bool log_to_terminal = true;
  int64_t start_timeout_ms = 60000;
  std::string executable;  // empty: the agent's own binary
  std::vector<std::string> args;
  // The worker's whole environment, less troupe's own variables (the agent adds those).
  std::map<std::string, std::string> env;
  // Variables that many starts share (WorkerOptions::shared_env), on top of env. The first start
  // on a connection that names shared_env_id carries them in shared_env; later ones carry the
  // id only, and the agent uses what that connection sent for it. Each side keeps the last
  // kSharedEnvsKept ids a connection named (the agent evicts exactly as the sender does), so an
  // id older than that is sent again.
  std::string shared_env_id;
  std::map<std::string, std::string> shared_env;
  static constexpr size_t kSharedEnvsKept = 8;
  // The driver vouches that `executable` is a troupe C++ binary that enters its role in
  // troupe::init (its own binary, and it called troupe::init): a standing agent may fork the
  // worker from a fork server of that binary (agent/fork_server.h) instead of exec'ing it.
  bool fork_server = false;
  // The driver vouches that `executable` is a Python interpreter and `args` run troupe._role
  // (the Python package's bootstrap `-c CODE`, or `-m troupe._role`): the agent may fork the worker
  // from a Python fork server of that interpreter, bootstrap and preload set
  // (agent/fork_server_choice.h).
  bool python_fork = false;
  // Modules that fork server imports before it forks any worker (ClusterOptions::python_preload).
  std::vector<std::string> python_preload;
  // A standing agent keeps the worker running when the connection that started it closes
  // (WorkerOptions::detached); stop_worker from any client, the agent's exit and `troupe stop`
  // end it.
  bool detached = false;

  bool operator==(const StartWorker&) const = default;
  // Without `with_shared_env`, leaves shared_env out (a start that names its id only).
  Map to_map(bool with_shared_env = true) const;
  static StartWorker from(const Value& kwargs);
};

struct StartWorkerReply {
  int64_t pid = 0;
  int64_t start_time = 0;  // the process's start time (clock ticks since boot, /proc), 0: unknown
  std::string unix_endpoint;
  std::string tcp_endpoint;
  std::vector<int> gpus;
  std::string log_path{};  // the worker's log file, on its host

  bool operator==(const StartWorkerReply&) const = default;
  Value to_value() const;
  static StartWorkerReply from(const Value& value);
};

struct StopWorker {
  static constexpr const char* kMethod = "stop_worker";
  std::string name;
  int64_t grace_ms = 3000;  // between SIGTERM to its process group and SIGKILL

  bool operator==(const StopWorker&) const = default;
  Map to_map() const;
  static StopWorker from(const Value& kwargs);
};

struct StopWorkerReply {
  std::string status;  // how it ended, e.g. "exit code 0", "signal 9 (Killed)"

  bool operator==(const StopWorkerReply&) const = default;
  Value to_value() const;
  static StopWorkerReply from(const Value& value);
};

struct ReservePorts {
  static constexpr const char* kMethod = "reserve_ports";
  std::string owner;
  int count = 1;
  int lo = 1400;  // [lo, hi): VirtualClusterOptions's default port range
  int hi = 5400;

  bool operator==(const ReservePorts&) const = default;
  Map to_map() const;
  static ReservePorts from(const Value& kwargs);
  // Reply: the ports, a list of ints.
  static Value reply(const std::vector<int>& ports);
  static std::vector<int> reply_from(const Value& value);
};

struct ReleasePorts {
  static constexpr const char* kMethod = "release_ports";
  std::string owner;

  bool operator==(const ReleasePorts&) const = default;
  Map to_map() const;
  static ReleasePorts from(const Value& kwargs);
  // Reply: how many ports were released, an int.
  static Value reply(int64_t released);
  static int64_t reply_from(const Value& value);
};

struct GpuState {
  static constexpr const char* kMethod = "gpu_state";
  std::vector<int> gpus;

  bool operator==(const GpuState&) const = default;
  Map to_map() const;
  static GpuState from(const Value& kwargs);
  // Reply: one line per GPU, a list of strings.
  static Value reply(const std::vector<std::string>& lines);
  static std::vector<std::string> reply_from(const Value& value);
};

struct Memory {
  static constexpr const char* kMethod = "memory";  // no arguments; reply: MemoryReply
};

struct Shutdown {
  // No arguments: the agent stops every worker (SIGTERM, then SIGKILL) and exits. Reply: nil,
  // sent before it stops them.
  static constexpr const char* kMethod = "shutdown";
};

struct MemoryReply {  // reply to "memory" (no arguments)
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
  std::map<std::string, int64_t> workers;  // resident bytes of each running worker's group

  bool operator==(const MemoryReply&) const = default;
  Value to_value() const;
  static MemoryReply from(const Value& value);
};

// A worker's log file on its host (every line it wrote to stdout or stderr, in order), read in
// bounded pieces: a reply carries at most max_bytes (<= kMaxBytes) of it, so that no request
// makes the agent allocate more. With tail_lines > 0 it reads the last tail_lines lines (those
// within the last max_bytes of the file); otherwise from byte `offset` on. A reply ends at a
// line's end unless one line is longer than max_bytes. The agent serves running workers and the
// exits it remembers (worker_table.h WT-3); `troupe logs` follows a log by asking again from
// next_offset.
struct ReadLog {
  static constexpr const char* kMethod = "read_log";
  static constexpr int64_t kMaxBytes = 1 << 20;
  std::string name;
  int64_t offset = 0;
  int64_t tail_lines = 0;
  int64_t max_bytes = 256 << 10;

  bool operator==(const ReadLog&) const = default;
  Map to_map() const;
  // Also refuses a negative offset or tail_lines and max_bytes outside 1..kMaxBytes.
  static ReadLog from(const Value& kwargs);
};

struct ReadLogReply {
  std::string name;
  int64_t pid = 0;     // the worker's (its latest, when the name was started again)
  bool alive = false;  // false once it exited: the log is complete
  int64_t offset = 0;  // where `data` starts in the file
  int64_t next_offset = 0;
  int64_t size = 0;  // of the file when read
  std::string data;  // whole lines, '\n'-terminated

  bool operator==(const ReadLogReply&) const = default;
  Value to_value() const;
  static ReadLogReply from(const Value& value);
};

// The stacks of running workers (`troupe stack`, WorkerGroup::dump_stacks): per worker the call
// it runs (from its call-status page, read without asking the worker), the Python stack of every
// Python thread (Python workers) and the native stack of every thread (eu-stack). The agent
// answers within kDeadlineMs whatever the workers do: a part it could not get within its deadline
// (a stopped or unreadable process) is named in `errors` instead. Empty `names`: every running
// worker of the agent.
struct DumpStacks {
  static constexpr const char* kMethod = "dump_stacks";
  static constexpr int64_t kDeadlineMs = 2500;  // the whole answer, every worker at once
  std::vector<std::string> names;

  bool operator==(const DumpStacks&) const = default;
  Map to_map() const;
  static DumpStacks from(const Value& kwargs);
};

struct WorkerStacks {
  std::string name;
  std::string host;
  std::string group;  // empty outside a group
  int64_t rank = -1;  // -1 outside a group
  int64_t pid = 0;
  std::string call;     // the method it runs; empty when idle
  int64_t call_ms = 0;  // for how long it has run it
  int64_t calls = 0;    // calls it started so far
  std::string python;   // faulthandler's dump of every Python thread; empty for C++ workers
  std::string native;   // eu-stack's output: every thread's native frames
  std::vector<std::string> errors;  // what could not be sampled, and why

  bool operator==(const WorkerStacks&) const = default;
  Value to_value() const;
  static WorkerStacks from(const Value& value);
  // The labelled text `troupe stack` prints, naming the worker `shown_name`:
  //   === worker NAME (group G, rank R) on host H, pid P: running 'M' for 1.2 s (N calls)
  //   --- Python stacks --- ... --- native stacks --- ... !!! not sampled: ...
  std::string describe(const std::string& shown_name) const;
};

// Reply to dump_stacks: the selected workers, by name.
struct DumpStacksReply {
  std::vector<WorkerStacks> workers;

  bool operator==(const DumpStacksReply&) const = default;
  Value to_value() const;
  static DumpStacksReply from(const Value& value);
};

// Object store (src/store): the driver asks its host's agent for room before it writes an object.
struct StoreReserve {
  static constexpr const char* kMethod = "store_reserve";
  int64_t size = 0;
  // Reply: the new object's name (store/shm_object.h), a string; Error(kOutOfMemory) naming the
  // requested, used and capacity bytes and the host when the store is full.
  static Value reply(const std::string& name) { return Value(name); }
  static std::string reply_from(const Value& value);
  Map to_map() const { return Map{{"size", size}}; }
  static StoreReserve from(const Value& kwargs);
};

// A driver on another host sends an object's bytes once (as one attachment); the agent writes
// its own copy, accounted like a reservation of that driver. Reply: the copy's name.
struct StorePut {
  static constexpr const char* kMethod = "store_put";
  Bytes data;
  Map to_map() const { return Map{{"data", data}}; }
  static StorePut from(const Value& kwargs);
};

struct StoreFree {
  static constexpr const char* kMethod = "store_free";
  std::string name;
  // Reply: whether the agent held it, a bool.
  Map to_map() const { return Map{{"name", name}}; }
  static StoreFree from(const Value& kwargs);
};

struct StoreUsage {  // reply to "store_usage" (no arguments)
  static constexpr const char* kMethod = "store_usage";
  int64_t objects = 0;  // objects the agent accounts for (reserved and not freed)
  int64_t bytes = 0;
  int64_t capacity = 0;
  int64_t files = 0;  // files of this agent in the store directory (results included)

  bool operator==(const StoreUsage&) const = default;
  Value to_value() const;
  static StoreUsage from(const Value& value);
};

// ---- agent events --------------------------------------------------------------------------

struct WorkerExited {
  static constexpr const char* kEvent = "worker_exited";
  std::string name;
  int64_t pid = 0;
  std::string status{};  // described, e.g. "exit code 3"
  std::optional<int> exit_code{};
  std::optional<int> signal{};
  std::vector<std::string> stderr_tail{};

  bool operator==(const WorkerExited&) const = default;
  Value to_value() const;
  static WorkerExited from(const Value& value);
};

// ---- head requests -------------------------------------------------------------------------

struct RegisterAgent {
  static constexpr const char* kMethod = "register_agent";
  std::string host_name;
  std::string address;
  double num_cpus = 0;
  std::vector<int> gpu_ids;
  std::map<std::string, std::string> labels;
  std::string unix_endpoint;
  std::string tcp_endpoint;
  int64_t pid = 0;
  std::string machine_id;
  int64_t memory_bytes = 0;
  std::string network_id;  // env::network_id(): equal for processes that share Unix sockets
  // The names of the workers the agent runs as it registers (absent: not said). A head started
  // again on its journal forgets what it recovered of a worker on this host that is not listed
  // (it died while no head heard of it): its named record and the bookings tied to it.
  std::optional<std::vector<std::string>> workers;

  bool operator==(const RegisterAgent&) const = default;
  Map to_map() const;
  static RegisterAgent from(const Value& kwargs);
};

struct RegisterAgentReply {
  int64_t host_index = 0;  // the host's id, assigned by the head

  bool operator==(const RegisterAgentReply&) const = default;
  Value to_value() const;
  static RegisterAgentReply from(const Value& value);
};

}  // namespace troupe::wire::control
