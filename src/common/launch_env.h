// The environment variables through which troupe's processes configure the processes they
// start: the driver (or `troupe start`) sets them for an agent, an agent for its workers, a
// worker group for its workers. Every name lives here, once, so that the side that sets a
// variable and the side that reads it cannot drift apart.
#pragma once

namespace troupe {

// Set for every process troupe starts.
namespace worker_env {
constexpr const char* kRole = "TROUPE_ROLE";  // "agent", "worker" or "forkserver"
}  // namespace worker_env

// Set by the driver (or `troupe start`) for an agent; read by agent::config_from_environment.
namespace agent_env {
constexpr const char* kHostName = "TROUPE_AGENT_HOST_NAME";
constexpr const char* kAddress = "TROUPE_AGENT_ADDRESS";
constexpr const char* kNumCpus = "TROUPE_AGENT_NUM_CPUS";
constexpr const char* kGpuIds = "TROUPE_AGENT_GPU_IDS";  // comma-separated
constexpr const char* kLabels = "TROUPE_AGENT_LABELS";   // k=v,k=v
// A label "resource:NAME" = AMOUNT gives the host that much of a custom resource (the head books
// it); troupe::kResourceLabelPrefix (include/troupe/cluster.h) is the same string.
constexpr const char* kResourceLabelPrefix = "resource:";
constexpr const char* kHead = "TROUPE_HEAD";
constexpr const char* kSessionDir = "TROUPE_SESSION_DIR";
constexpr const char* kSocketDir = "TROUPE_SOCKET_DIR";
constexpr const char* kLogToTerminal = "TROUPE_LOG_TO_DRIVER";            // "0" turns it off
constexpr const char* kForkServer = "TROUPE_FORK_SERVER";                 // "0" turns it off
constexpr const char* kObjectStoreMemory = "TROUPE_OBJECT_STORE_MEMORY";  // bytes
// "0": contain workers with a subreaper instead of cgroups (agent/containment.h).
constexpr const char* kCgroups = "TROUPE_CGROUPS";
}  // namespace agent_env

// Set by an agent for each worker it starts; read by the worker runtime.
namespace worker_env {
constexpr const char* kName = "TROUPE_WORKER_NAME";          // the worker's name
constexpr const char* kUnixEndpoint = "TROUPE_WORKER_UNIX";  // unix:PATH to listen on
constexpr const char* kTcpHost = "TROUPE_WORKER_TCP_HOST";   // address to listen on with TCP
constexpr const char* kReadyFd = "TROUPE_READY_FD";          // pipe to write "ready ...\n" to
constexpr const char* kHostName = "TROUPE_HOST_NAME";        // the simulated host's name
// The pid of the worker's agent: the owner part of the store objects the worker creates for its
// results (the agent removes them when it exits; store/shm_object.h).
constexpr const char* kStoreOwner = "TROUPE_STORE_OWNER";
// The GPUs the worker may use (the agent sets it from the worker's assignment).
constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
// The fork server's socket descriptor, in the fork server (TROUPE_ROLE=forkserver).
constexpr const char* kForkServerFd = "TROUPE_FORK_SERVER_FD";
// Set (to anything) to make the fork server double-fork even where it would not.
constexpr const char* kForkServerDoubleFork = "TROUPE_FORK_SERVER_DOUBLE_FORK";
// The worker's container id, by which its agent knows whose a process is (agent/containment.h).
constexpr const char* kContainer = "TROUPE_CONTAINER";
// The worker's call-status page (common/call_status.h), created by its agent.
constexpr const char* kCallStatus = "TROUPE_CALL_STATUS";
// A Python worker's stack file and the signal that asks for a dump into it: the worker registers
// faulthandler for that signal, writing to that file, followed by an end marker
// (agent/stack_sampler.h).
constexpr const char* kPythonStacks = "TROUPE_PYTHON_STACKS";
constexpr const char* kPythonStacksSignal = "TROUPE_PYTHON_STACKS_SIGNAL";
}  // namespace worker_env

// Set by a worker group for each of its workers (the torch.distributed convention).
namespace group_env {
constexpr const char* kGroup = "TROUPE_WORKER_GROUP";  // the group's name
constexpr const char* kRank = "RANK";
constexpr const char* kLocalRank = "LOCAL_RANK";
constexpr const char* kWorldSize = "WORLD_SIZE";
constexpr const char* kMasterAddr = "MASTER_ADDR";
constexpr const char* kMasterPort = "MASTER_PORT";
}  // namespace group_env

// Read by every role.
namespace launch_env {
// The cluster's shared secret: the value itself, a descriptor to read it from (consumed and
// unset), or a file holding it (common/token.h).
constexpr const char* kToken = "TROUPE_TOKEN";
constexpr const char* kTokenFd = "TROUPE_TOKEN_FD";
constexpr const char* kTokenFile = "TROUPE_TOKEN_FILE";
// host:port of a standing cluster's head, for a driver that connects to one.
constexpr const char* kAddress = "TROUPE_ADDRESS";
constexpr const char* kLogLevel = "TROUPE_LOG_LEVEL";  // debug, info, warning, error
// TLS on every TCP connection (transport/tls.h): the directory of the cluster's CA and of this
// process's certificate, and the certificate's name (default: the host name). An agent sets
// both for its workers (the name: its host's).
constexpr const char* kTlsDir = "TROUPE_TLS_DIR";
constexpr const char* kTlsName = "TROUPE_TLS_NAME";
constexpr const char* kStoreDir = "TROUPE_STORE_DIR";  // the object store's directory
// The timeline recorder (common/timeline.h): "0", "off" or "false" turns recording off; the
// ring buffer's capacity in events. Read by the driver; workers follow their driver's cluster.
constexpr const char* kTimeline = "TROUPE_TIMELINE";
constexpr const char* kTimelineEvents = "TROUPE_TIMELINE_EVENTS";
// Modules a Python fork server preloads (comma-separated): read by the driver (added to
// ClusterOptions::python_preload) and by an agent (added to every preload set it serves); set by
// an agent for its Python fork servers (their exact set). agent/fork_server_choice.h.
constexpr const char* kPythonPreload = "TROUPE_PYTHON_PRELOAD";
// Every variable whose name starts with this is troupe's own: a process troupe starts gets
// only the ones meant for it.
constexpr const char* kPrefix = "TROUPE_";
}  // namespace launch_env

}  // namespace troupe
