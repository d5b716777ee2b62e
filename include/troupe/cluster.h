// The runtime seen from the driver: a Cluster of hosts and the Workers started on them.
//
//   troupe::Cluster cluster(troupe::ClusterOptions::local(2, /*gpus_per_host=*/2));
//   troupe::Worker w = cluster.start_worker({.class_name = "Adder", .args = {{"base", 10}},
//                                            .host = 1});
//   int sum = w.call<int>("add", {{"a", 1}, {"b", 2}}).get();
//
// With no address, a Cluster is embedded: the head runs inside the driver and one agent process
// per simulated host runs on this machine, each with its own loopback address (127.0.0.2,
// 127.0.0.3, ...) and its own declared CPUs and GPUs. Calls go straight from the driver to the
// worker process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "troupe/error.h"
#include "troupe/future.h"
#include "troupe/object_ref.h"
#include "troupe/stream.h"
#include "troupe/value.h"

namespace troupe {

struct HostSpec {
  std::string name;     // default "host-<index>"
  std::string address;  // default 127.0.0.<index + 2>
  double num_cpus = 0;  // 0: the number of cores of this machine
  int num_gpus = 0;     // declared GPUs: real slots for placement and CUDA_VISIBLE_DEVICES
  std::map<std::string, std::string> labels;
};

// Where the workers of a class run when not in the driver's own executable.
struct WorkerExecutable {
  std::string path;                        // absolute, or searched in PATH
  std::vector<std::string> args;           // extra command-line arguments
  std::map<std::string, std::string> env;  // extra environment variables
  // `path` is a Python interpreter and `args` run troupe._role (e.g. {"-m", "troupe._role"}; the
  // Python package's resolver sets it for its bootstrap): the agent may fork the worker from a
  // Python fork server of that interpreter and arguments that preloaded
  // ClusterOptions::python_preload (README "Python fork server").
  bool python = false;
};

// A command prefix for the workers whose names match a glob pattern, e.g.
// {"policy-*", {"nsys", "profile", "-o", "/tmp/policy"}} (the reference design forwards a
// profiler configuration this way).
struct LaunchWrapperRule {
  std::string pattern;               // fnmatch(3) glob over the worker name
  std::vector<std::string> command;  // prepended to the worker's command line
};

struct ClusterOptions {
  // HOST:PORT of a standing cluster's head (`troupe start --head`). Empty: the environment
  // variable TROUPE_ADDRESS when set, else an embedded cluster of `hosts`. Connecting needs the
  // cluster token: TROUPE_TOKEN, else the file named by TROUPE_TOKEN_FILE. A connected cluster
  // has the hosts whose agents joined the head (`hosts` is not used), and worker classes not
  // mapped in `executables` run this program's executable, which must be at the same path on
  // every host.
  std::string address;
  std::vector<HostSpec> hosts = {HostSpec{}};
  // Logs, sockets and the token file live here. Default: $TMPDIR/troupe-<uid>/session-<time>-<pid>
  // (the base is created with mode 0700; one of another user or open to others is refused).
  // A directory given here is created with mode 0700 when missing; an existing one must belong
  // to this user and be closed to group and others, or the Cluster constructor throws
  // Error(kInvalidArgument) saying so.
  std::string session_dir;
  // Copy every worker's stdout and stderr lines to this terminal, prefixed "(name pid=N) ".
  bool log_to_driver = true;
  // How long to wait for the agents to come up.
  std::chrono::milliseconds start_timeout{30000};
  // Class name -> executable, for classes that do not live in the driver's binary.
  std::map<std::string, WorkerExecutable> executables;
  // Asked for classes that are not in `executables` (before the class registry); returns the
  // executable of such a class, or nullopt. Called on the caller's thread of start_worker and
  // WorkerGroup; must be thread-safe. The Python package maps "pkg.module.Class" names this way.
  std::function<std::optional<WorkerExecutable>(const std::string& class_name)> executable_resolver;
  // What the agents run: empty path means this process's own executable (which must call
  // troupe::init). A host that is not such a program (the Python interpreter) names one here.
  // Agents get TROUPE_ROLE=agent and their settings in the environment, plus `env`.
  WorkerExecutable agent_executable;
  // Modules every host's Python fork server imports once, before it forks any Python worker
  // (README "Python fork server"), in addition to troupe's worker runtime; the driver's
  // TROUPE_PYTHON_PRELOAD (comma-separated) adds to them. Each a dotted module name, else the
  // Cluster constructor throws Error(kInvalidArgument).
  std::vector<std::string> python_preload;
  // Applied, first match wins, to workers started without their own launch_wrapper.
  std::vector<LaunchWrapperRule> launch_wrappers;

  // Liveness on a standing cluster: the driver sends a heartbeat to each host's agent every
  // interval; a host that sends nothing for host_lost_timeout is lost (calls pending on its
  // workers fail with kHostLost), and so is the driver for the agents (they stop its workers).
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds host_lost_timeout{700};

  // The object store (README "Large arguments: the object store"). A Bytes argument of at least
  // `object_store_threshold` bytes (0: none; only ObjectRefs) goes to workers on the driver's
  // host through shared memory, and so do such results; each embedded agent accounts for at
  // most `object_store_memory` bytes of objects (0: 30 % of the host's MemTotal). A standing
  // cluster's agents take theirs from `troupe start --object-store-memory`.
  size_t object_store_threshold = size_t{1} << 20;
  int64_t object_store_memory = 0;

  // Prometheus metrics of this driver (calls per method and group: started, finished, failed,
  // latency; bytes sent; restarts) on http://metrics_address:metrics_port/metrics, for requests
  // that carry the cluster token (`Authorization: Bearer TOKEN`). 0: any free port
  // (Cluster::metrics_address() tells which); negative (the default): no metrics.
  int metrics_port = -1;
  std::string metrics_address = "127.0.0.1";

  // Timeline recording (Cluster::timeline): the driver records this cluster's group dispatches,
  // per-worker sends, worker start phases, deaths, restarts and host losses, and its workers
  // record their calls, each process in a bounded ring buffer (16384 events by default;
  // TROUPE_TIMELINE_EVENTS). Off when false or when the driver's environment has
  // TROUPE_TIMELINE=0 as the Cluster is constructed.
  bool timeline = true;

  // `num_hosts` simulated hosts with the given declared resources each.
  static ClusterOptions local(size_t num_hosts, int gpus_per_host = 0, double cpus_per_host = 0);
  // A standing cluster's head at `address` ("HOST:PORT").
  static ClusterOptions connect(std::string address);
};

// Custom resources a host offers (`troupe start --resources NAME=AMOUNT`) travel as its labels
// "resource:NAME" -> AMOUNT (a decimal number).
inline constexpr const char* kResourceLabelPrefix = "resource:";

struct HostInfo {
  size_t index = 0;
  std::string name;
  std::string address;
  double num_cpus = 0;
  std::vector<int> gpu_ids;
  std::map<std::string, std::string> labels;
  pid_t agent_pid = 0;
  bool alive = true;
};

struct HostMemory {
  std::string host;
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
  // Resident memory of each worker group's processes on this host (groups are registered when
  // created and forgotten when shut down).
  std::map<std::string, int64_t> group_bytes;
};

// What the object store of one host's agent accounts for.
struct ObjectStoreUsage {
  int64_t objects = 0;   // live objects reserved through this agent
  int64_t bytes = 0;     // their bytes
  int64_t capacity = 0;  // the agent's limit
  int64_t files = 0;     // files named for this agent in /dev/shm (results not yet taken too)
};

// What Cluster::timeline wrote.
struct TimelineSummary {
  bool recording = true;  // false: recording was off (ClusterOptions::timeline, TROUPE_TIMELINE)
  size_t tracks = 0;      // processes in the trace: the driver and each worker
  size_t events = 0;      // span and instant events written
  // Live workers whose events are not in the trace, each "name: reason" (no answer by the
  // deadline, connection lost, ...).
  std::vector<std::string> missing;
  // The largest clock-alignment error bound over the collected workers, in microseconds: each
  // worker's events are placed on the driver's clock to within this (half the shortest round
  // trip of the clock probes).
  double clock_error_us = 0;
};

// Environment variables that many workers share, held once (a WorkerGroup's placement lists,
// AVAILABLE_ADDR_LIST and AVAILABLE_PORT_LIST, grow with the group: ~210 KB at 10,000 workers).
// Each agent is sent them once, with the first start that names them; later starts name them
// by id. Immutable once made; make one with make_shared_env.
struct SharedEnv {
  std::string id;  // unique in this process
  std::map<std::string, std::string> vars;
};
std::shared_ptr<const SharedEnv> make_shared_env(std::map<std::string, std::string> vars);

struct WorkerOptions {
  std::string class_name{};
  Kwargs args{};            // constructor arguments, by name
  size_t host = 0;          // index into Cluster::hosts()
  std::string name{};       // default "<class>-<n>"; unique within the cluster
  std::vector<int> gpus{};  // GPU ids of that host for CUDA_VISIBLE_DEVICES (may be shared)
  int num_gpus = 0;         // or: this many GPUs not used by another worker, chosen by the agent
  // The worker's environment: the driver's as it is at this call (less launcher variables such
  // as SLURM_* and PMI_*, and troupe's own TROUPE_*), then `env` on top. With
  // inherit_driver_environment false, `env` is the whole environment (a WorkerGroup passes the
  // snapshot it took when it was created). It travels with the start request: the worker's agent
  // adds only troupe's own variables and CUDA_VISIBLE_DEVICES.
  std::map<std::string, std::string> env{};
  // Variables on top of `env` (they win over it) that other workers have too; null: none.
  std::shared_ptr<const SharedEnv> shared_env{};
  bool inherit_driver_environment = true;
  std::vector<std::string> launch_wrapper{};  // command prefix, e.g. {"valgrind", "-q"}
  // Ports reserved on the host (VirtualCluster) that this worker binds: the agent stops holding
  // them just before the worker starts.
  std::vector<int> ports{};
  bool log_to_driver = true;
  std::chrono::milliseconds start_timeout{60000};
  // The worker group and rank, named in errors (set by WorkerGroup).
  std::string group{};
  int rank = -1;
  // On a standing cluster, the worker outlives this driver: neither its agent (when this
  // driver's connection closes) nor Cluster::shutdown stops it; Worker::stop (from any driver,
  // see Cluster::attach_worker), its agent's exit and `troupe stop` do. An embedded cluster's
  // workers end with it whatever this says.
  bool detached = false;
};

// A worker registered under a name in the head of a standing cluster (Cluster::register_name),
// where every driver of that cluster finds it (Cluster::lookup_name) and calls it
// (Cluster::attach_worker).
struct NamedWorker {
  std::string name_space;  // the namespace; may be empty
  std::string name;        // non-empty
  // Not detached: the record goes when the registering driver's connection to the head closes.
  // Either way it goes when the worker exits, its host's agent leaves, or remove_name. A standing
  // head keeps the records in its journal: started again after a kill -9, it has them all, held
  // by no driver connection, and drops each whose worker its agent does not list as it
  // registers again.
  bool detached = false;
  std::string host;          // the name of the worker's host
  std::string worker;        // the worker's name as its agent knows it (Worker::agent_name)
  std::string tcp_endpoint;  // "tcp:ADDRESS:PORT" (Worker::tcp_endpoint)
  int64_t pid = 0;
  std::string info;  // opaque to troupe, at most 1 MiB: what the registering driver stores
  // Cluster::list_names only: "driver at ADDRESS" while the driver that registered it is
  // connected to the head, "" once it left (a detached record) or the head was started again.
  std::string held_by;
};

namespace internal {
class WorkerState;  // defined inside the library only
class ClusterImpl;  // defined inside the library only
struct Access;      // the library's own access to the objects behind the public handles
}  // namespace internal

// A handle to one worker. Cheap to copy; all copies refer to the same worker. Thread-safe.
class Worker {
 public:
  // Not valid(); made valid by assigning a handle from Cluster::start_worker or a WorkerGroup.
  Worker() = default;

  bool valid() const { return state_ != nullptr; }
  const std::string& name() const;
  const std::string& class_name() const;
  size_t host() const;
  // 0 until the process has started.
  pid_t pid() const;
  // The GPU ids the worker sees (its CUDA_VISIBLE_DEVICES); empty until started.
  std::vector<int> gpus() const;
  // The worker's log file (stdout and stderr).
  std::string log_path() const;
  // Completes when the worker's object is constructed, or with the error that prevented it.
  Future<void> ready() const;
  // False once the worker died, failed to start or was stopped.
  bool alive() const;

  // Calls `method` with keyword arguments; returns at once. Calls to one worker run in the
  // order they were made. A call made before the worker is ready is sent once it is. The future
  // fails with kUnknownMethod, kInvalidArgument (naming the argument), kMethodFailed (with the
  // exception's type and message), kWorkerDied, ... each naming the worker and method.
  template <typename R = Value>
  Future<R> call(const std::string& method, Kwargs kwargs = {}) const {
    return Future<R>(call_value(method, kwargs));
  }
  Future<Value> call_value(const std::string& method, const Kwargs& kwargs) const;
  // Calls a stream method (ClassBuilder::stream_method); items arrive in the returned stream.
  ValueStream call_stream(const std::string& method, const Kwargs& kwargs = {}) const;

  // Completes once the worker is dead (or stopped), with a description of how it ended.
  Future<std::string> died() const;
  // The name the worker's agent knows it by (unique among the drivers of a standing cluster).
  const std::string& agent_name() const;
  // "tcp:ADDRESS:PORT", where anyone with the cluster token may call it; empty until started.
  std::string tcp_endpoint() const;

  // Stops the process (SIGTERM to its process group, SIGKILL after `grace`). Blocks until it is
  // gone; returns how it ended ("exit code 0", "signal 9 (Killed)"). Pending calls fail with
  // kWorkerDied.
  std::string stop(std::chrono::milliseconds grace = std::chrono::milliseconds(3000)) const;

 private:
  friend struct internal::Access;
  explicit Worker(std::shared_ptr<internal::WorkerState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::WorkerState> state_;
};

class Cluster {
 public:
  // Starts the embedded head and one agent per host; blocks until every agent has registered.
  // Throws Error (kTimeout, kWorkerDied naming the agent that exited, ...). With an address
  // (ClusterOptions::address or TROUPE_ADDRESS), connects to that standing cluster's head and
  // its live hosts' agents instead; throws kUnauthenticated without the token,
  // kConnectionLost/kTimeout when the head cannot be reached, kResourceUnavailable when no host
  // is alive.
  explicit Cluster(ClusterOptions options = {});
  // shutdown().
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Starts a worker; returns at once with its handle (see Worker::ready). Throws
  // Error(kInvalidArgument) for a bad host index or a duplicate name, and kUnknownClass for a
  // class that is neither registered in this binary nor mapped to an executable.
  Worker start_worker(WorkerOptions options);

  // The head's registry of named workers (standing clusters only; an embedded cluster throws
  // Error(kInvalidArgument)). Each blocks for one round trip to the head and throws its Error
  // (kInvalidArgument for an empty name or an oversized field).
  // register_name: claims (record.name_space, record.name) for this driver; nullopt when it did,
  // else the record that holds the name. With `update`, replaces the record this driver
  // registered under that name (e.g. with the worker once it started); throws
  // Error(kInvalidArgument) when that record is gone.
  std::optional<NamedWorker> register_name(const NamedWorker& record, bool update = false);
  // The record named so, or nullopt.
  std::optional<NamedWorker> lookup_name(const std::string& name_space, const std::string& name);
  // Every record of every driver, by namespace and name, with held_by and without info.
  std::vector<NamedWorker> list_names();
  // Removes the record (any driver may); whether there was one. With `worker`, only while the
  // record names that worker (NamedWorker::worker; "" for one not filled in): a record another
  // driver registered under the name since stays.
  bool remove_name(const std::string& name_space, const std::string& name,
                   const std::optional<std::string>& worker = std::nullopt);
  // A handle to a worker another driver started (a NamedWorker's host, worker and endpoint):
  // calls go over a new authenticated connection to `record.tcp_endpoint` (the object exists:
  // no constructor runs, ready() completes once connected); stop() asks the worker's agent to
  // stop it. The worker keeps running when this driver shuts down. Its name is
  // record.worker. Throws Error(kInvalidArgument) for a host this cluster does not know or an
  // empty endpoint; a worker that cannot be reached fails ready() and every call
  // (kWorkerDied).
  Worker attach_worker(const NamedWorker& record, const std::string& class_name);

  // Every host, by the id the head assigned. On a standing cluster the list is read from the head
  // at each call: hosts that joined since are there, lost ones have alive == false.
  std::vector<HostInfo> hosts() const;
  const std::string& session_dir() const;
  // "ADDRESS:PORT" of this driver's metrics endpoint (ClusterOptions::metrics_port); empty when
  // it serves none.
  std::string metrics_address() const;
  // Memory of every live host, read from /proc by its agent. Blocks at most `timeout`; hosts
  // that do not answer in time are left out.
  std::vector<HostMemory> host_memory(
      std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  // Writes `data` once into the object store of the driver's host and returns a reference to
  // pass as an argument (see object_ref.h). Blocks for one request to the host's agent. Throws
  // Error(kOutOfMemory) when the store is full (naming requested, used and capacity bytes),
  // kShutdown after shutdown(). Without an agent on the driver's host the reference holds the
  // bytes in memory and they travel as an ordinary argument. Thread-safe.
  ObjectRef put(const Bytes& data);
  // The object store usage of `host`'s agent. Blocks at most `timeout`; throws its Error.
  ObjectStoreUsage object_store_usage(
      size_t host, std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  // Writes a Chrome trace-event JSON file at `path` (open it in https://ui.perfetto.dev or
  // chrome://tracing): one track per worker ("group/rank name (pid N) @host") and one for the
  // driver, with each worker's call spans (method, group, rank, argument bytes), the driver's
  // group dispatches (until the last reply) and per-worker sends, start phases (spawn, connect:
  // seen by the driver; constructor: by the worker), and deaths, restarts and host losses as
  // instants. Every time is on the driver's clock: each worker's clock offset is estimated from
  // round trips on its connection, and the bound is in the file ("otherData") and the summary.
  // Asks every live worker for its events and waits at most `timeout` for all of them; a worker
  // that does not answer in time is listed as missing, not waited for. Events of workers that
  // already died are gone with them (the driver's events about them stay). Blocks; thread-safe.
  // Throws Error(kInvalidArgument) when `path` cannot be written, naming it.
  TimelineSummary timeline(const std::string& path,
                           std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // Stops every worker (SIGTERM, then SIGKILL after a grace period), then every agent; waits
  // for all of them. On a standing cluster the agents and head keep running: only this
  // driver's workers stop. Idempotent; thread-safe.
  void shutdown();

 private:
  friend struct internal::Access;
  // Takes over an implementation built elsewhere (internal::Access::make_cluster). Not null.
  explicit Cluster(std::unique_ptr<internal::ClusterImpl> impl);
  std::unique_ptr<internal::ClusterImpl> impl_;
};

}  // namespace troupe
