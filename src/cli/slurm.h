// `troupe slurm [options] -- DRIVER ARGS...`: runs a driver across the nodes of a Slurm
// allocation (inside sbatch or salloc).
//
// What it does, in order:
//   1. reads the allocation (SLURM_JOB_ID, SLURM_JOB_NODELIST expanded by `scontrol show
//      hostnames`) and makes a private run directory $TMPDIR/troupe-<uid>/standing-job<JOBID>
//      (mode 0700) holding a new random token (file mode 0600);
//   2. runs the head in this process, on this node (under sbatch the batch host, the first node
//      of the allocation), bound to the node's NodeAddr (or --node-ip-address) and --port (0:
//      any free port; printed), expecting one host per node, named and ordered as the node list;
//   3. starts one agent per node as one job step, `srun --nodes=N --ntasks=N
//      --ntasks-per-node=1 --overlap --kill-on-bad-exit=1 --export=ALL AGENT start --address
//      HEAD --block --slurm` (the step shares the job's CPUs and gets all of its GPUs, as a step
//      without --gres does; each agent declares what Slurm gave it on its node, see
//      StartAgentOptions::slurm); the token reaches the agents in their environment only;
//   4. waits until every node's agent registered, printing progress; fails after --timeout
//      naming the nodes that did not, or as soon as the agent step exits (naming the nodes that
//      never registered, the agent binary and the end of srun's output);
//   5. runs DRIVER (in its own process group; stdin, stdout and stderr inherited) with
//      TROUPE_ADDRESS=HEAD and TROUPE_TOKEN set;
//   6. when the driver exits, or on SIGTERM/SIGINT/SIGHUP (scancel, the time limit, ^C), which
//      it forwards to the driver (SIGKILL to its group after a grace period): closes the head,
//      on which every agent stops its workers and exits, then ends the agent step (SIGTERM to
//      srun, which cancels the step, if it has not ended within a few seconds), and removes
//      the run directory. Nothing it started is left on any node.
// The exit code is the driver's (128 + N when a signal N ended it); 1 when troupe slurm failed
// before the driver ran, with the reason on stderr.
// Launcher variables (SLURM_*, PMI_*, ...) reach the driver but never its workers (the driver
// strips them from the environment it sends, see env::is_launcher_variable).
// Ports: agents reserve worker ports per host (PortBook: a bound socket plus a machine-wide
// claim), so agents of two jobs sharing a node never hand out the same port.
#pragma once

#include <string>
#include <vector>

namespace troupe::cli {

struct SlurmOptions {
  std::vector<std::string> driver;  // DRIVER ARGS...
  std::string node_ip_address;      // the head's address; empty: this node's NodeAddr
  int port = 0;                     // the head's port; 0: any free port
  int timeout_s = 60;               // for every agent to register
  std::string agent_binary;         // the troupe executable srun runs; empty: this one
  int stop_grace_s = 5;             // from SIGTERM to SIGKILL, for the driver and the agent step
};

// Returns the process exit code (see above). Blocks until everything it started is gone.
int run_slurm(const SlurmOptions& options);

}  // namespace troupe::cli
