// What troupe::init (include/troupe/troupe.h) records about this process.
#pragma once

namespace troupe::internal {

// True once troupe::init returned in this process: its executable is a troupe C++ binary that
// enters the role TROUPE_ROLE names (worker, agent, fork server) before main goes on, so an
// agent may start a fork server of it (agent/fork_server.h). A Python driver never calls it.
bool initialised();

}  // namespace troupe::internal
