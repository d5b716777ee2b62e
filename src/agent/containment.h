// Containment: every worker and every process it creates, daemonized or not, in one container
// the kernel tracks, so that every way a worker ends also ends every process it created (an
// orphaned helper would otherwise keep, e.g., its GPU memory).
//
// Two implementations behind one interface, chosen once at agent start (and logged):
//   cgroup:    a cgroup v2 directory troupe-agent-PID under the agent's own cgroup, and one child
//              per worker; ending a container writes its cgroup.kill. Used where the agent can
//              create cgroups there, join one, and the kernel has cgroup.kill (5.14).
//   subreaper: the agent is a child subreaper, so processes that escape a worker's process tree
//              (fork, setsid, fork again) become the agent's children; each worker's processes
//              carry the marker TROUPE_CONTAINER=<id> in their environment (/proc/PID/environ),
//              by which the agent knows whose they are. TROUPE_CGROUPS=0 in the agent's
//              environment forces this mode.
//
// Invariants (cited by tests/integration/containment_test.cc and src/agent/worker_table_test.cc):
//   CT-1 Contained from the start: a worker joins its container before it runs any code of its
//        own (the exec'd child before exec, the fork server's worker before anything else), so
//        whatever it creates is in the container too. A worker that cannot join does not run.
//   CT-2 Ends with the worker: when the agent reaps a worker (its own exit, a signal, a stop by
//        the agent or its driver), everything left in its container is SIGKILLed. The worker's
//        exit status is the one it had: its container is ended while it is a zombie.
//   CT-3 Ends with the agent: on exit the agent kills whatever is left in any of its containers;
//        at start a cgroup-mode agent kills and removes the containers of agents that are gone
//        (troupe-agent-PID where no process PID exists).
//   CT-4 Only its own: an agent kills only what is in its own containers: cgroups it created,
//        or (subreaper mode) its own unreaped children carrying one of its markers, with their
//        descendants, each pinned by a pidfd and checked by start time before the signal.
//   CT-5 Limit of the subreaper mode: a descendant that replaces its environment without the
//        marker, and escapes, is only killed when the agent exits (it is an unknown child then).
// Not thread-safe: the agent's I/O thread owns it.
#pragma once

#include <memory>
#include <string>

#include "common/private_dir.h"

namespace troupe::agent {

// One worker's container.
struct Container {
  std::string id;  // "<agent pid>.<n>"; also the marker's value (TROUPE_CONTAINER)
  // cgroup mode: the container's cgroup.procs, open for writing: a process that writes "0" to it
  // joins (CT-1). Invalid in subreaper mode. The caller closes it once the worker started.
  fs::UniqueFd procs;
};

// The marker's and the mode switch's names: worker_env::kContainer and agent_env::kCgroups
// (common/launch_env.h).
class Containment {
 public:
  virtual ~Containment() = default;
  // The cgroup mode when `try_cgroups` and it works here (else a warning names why), otherwise
  // the subreaper mode. Makes this process a child subreaper in both modes (escaped processes are
  // then reaped by the agent, never left as zombies of an init that does not reap).
  static std::unique_ptr<Containment> create(bool try_cgroups);

  virtual const char* mode() const = 0;  // "cgroup" or "subreaper"
  // A new, empty container for a worker about to start. Throws Error(kInternal) when it cannot.
  virtual Container open() = 0;
  // Kills everything in the container (CT-2); never blocks. Its cgroup is removed once empty.
  virtual void end(const std::string& id) = 0;
  // At agent exit: kills everything in every container of this agent (CT-3), waits (bounded, a
  // few seconds) until they are empty and removes them.
  virtual void end_all() = 0;
};

// The cgroup v2 directory of this process ("" when there is no cgroup2 mount or no "0::" line).
std::string own_cgroup_dir();

}  // namespace troupe::agent
