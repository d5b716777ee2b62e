// Environment variables through which an agent configures the processes it starts.
#pragma once

namespace troupe::worker_env {

constexpr const char* kRole = "TROUPE_ROLE";                 // "worker" or "agent"
constexpr const char* kName = "TROUPE_WORKER_NAME";          // the worker's name
constexpr const char* kUnixEndpoint = "TROUPE_WORKER_UNIX";  // unix:PATH to listen on
constexpr const char* kTcpHost = "TROUPE_WORKER_TCP_HOST";   // address to listen on with TCP
constexpr const char* kReadyFd = "TROUPE_READY_FD";          // pipe to write "ready ...\n" to
constexpr const char* kHostName = "TROUPE_HOST_NAME";        // the simulated host's name
// The pid of the worker's agent: the owner part of the store objects the worker creates for its
// results (the agent removes them when it exits; store/shm_object.h).
constexpr const char* kStoreOwner = "TROUPE_STORE_OWNER";

}  // namespace troupe::worker_env
