// The troupe command. Parsed with CLI11: every subcommand has --help, and a bad or missing value
// is an error naming the option (exit code 2).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli/demo.h"
#include "cli/logs.h"
#include "cli/slurm.h"
#include "cli/stack.h"
#include "cli/standing.h"
#include "cli/status.h"
#include "cli/timeline.h"
#include "troupe/troupe.h"

int main(int argc, char** argv) {
  troupe::init(argc, argv);  // runs the worker or agent role when this process is one
  CLI::App app{"troupe: drive groups of worker processes from one controller", "troupe"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("troupe ") + troupe::version());

  troupe::cli::DemoOptions demo;
  CLI::App* demo_cmd = app.add_subcommand(
      "demo",
      "start an embedded cluster, run workers on every host, call them, print results and "
      "timings, shut everything down");
  demo_cmd->add_option("--hosts", demo.hosts, "simulated hosts (each its own agent and address)")
      ->check(CLI::Number)
      ->check(CLI::IsMember({1, 2, 4}))
      ->capture_default_str();
  demo_cmd->add_option("--hold", demo.hold_seconds, "keep the cluster up this many seconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  std::string session, status_address, status_token_file;
  CLI::App* status_cmd = app.add_subcommand(
      "status", "hosts, reservations, worker groups' memory and workers of a running cluster");
  CLI::Option* session_opt = status_cmd->add_option(
      "--session", session,
      "an embedded cluster's session directory (default: this user's newest)");
  status_cmd
      ->add_option("--address", status_address,
                   "HOST:PORT of a standing cluster's head (instead of --session)")
      ->excludes(session_opt);
  status_cmd
      ->add_option("--token-file", status_token_file,
                   "the cluster token (default: TROUPE_TOKEN, else this host's run directory)")
      ->check(CLI::ExistingFile);

  troupe::cli::LogsOptions logs;
  CLI::App* logs_cmd = app.add_subcommand(
      "logs",
      "print the output of a worker, or of every worker of a group, read through its host's "
      "agent (also after it exited); lines are prefixed (NAME pid=PID)");
  logs_cmd->add_option("WORKER_OR_GROUP", logs.target, "a worker's name, or a group (name prefix)")
      ->required();
  CLI::Option* logs_session =
      logs_cmd->add_option("--session", logs.session,
                           "an embedded cluster's session directory (default: this user's newest)");
  logs_cmd
      ->add_option("--address", logs.address,
                   "HOST:PORT of a standing cluster's head (instead of --session)")
      ->excludes(logs_session);
  logs_cmd
      ->add_option("--token-file", logs.token_file,
                   "the cluster token (default: TROUPE_TOKEN, else this host's run directory)")
      ->check(CLI::ExistingFile);
  logs_cmd->add_option("--tail", logs.tail, "only the last N lines of each worker")
      ->check(CLI::PositiveNumber);
  logs_cmd->add_flag("-f,--follow", logs.follow,
                     "keep printing new lines until the workers exit (or Ctrl-C)");

  troupe::cli::StackOptions stack;
  CLI::App* stack_cmd = app.add_subcommand(
      "stack",
      "print the stacks of running workers (every Python thread's Python stack, every thread's "
      "native stack), each with its group, rank, host and the call it runs and for how long");
  stack_cmd->add_option("GROUP_OR_WORKER", stack.target,
                        "a worker's name, or a group (name prefix); default: every worker");
  CLI::Option* stack_session = stack_cmd->add_option(
      "--session", stack.session,
      "an embedded cluster's session directory (default: this user's newest)");
  stack_cmd
      ->add_option("--address", stack.address,
                   "HOST:PORT of a standing cluster's head (instead of --session)")
      ->excludes(stack_session);
  stack_cmd
      ->add_option("--token-file", stack.token_file,
                   "the cluster token (default: TROUPE_TOKEN, else this host's run directory)")
      ->check(CLI::ExistingFile);

  troupe::cli::TimelineOptions timeline;
  CLI::App* timeline_cmd = app.add_subcommand(
      "timeline",
      "write a Chrome trace (Perfetto, chrome://tracing) of a running cluster's workers: one "
      "track per worker with its calls, clocks aligned to this host's; the driver's track is "
      "not in it (Cluster::timeline writes that)");
  CLI::Option* timeline_session = timeline_cmd->add_option(
      "--session", timeline.session,
      "an embedded cluster's session directory (default: this user's newest)");
  timeline_cmd
      ->add_option("--address", timeline.address,
                   "HOST:PORT of a standing cluster's head (instead of --session)")
      ->excludes(timeline_session);
  timeline_cmd
      ->add_option("--token-file", timeline.token_file,
                   "the cluster token (default: TROUPE_TOKEN, else this host's run directory)")
      ->check(CLI::ExistingFile);
  timeline_cmd->add_option("-o,--output", timeline.output, "the trace file to write")
      ->capture_default_str();
  timeline_cmd
      ->add_option("--timeout", timeline.timeout_s,
                   "seconds for everything; a worker or agent that has not answered by then is "
                   "listed as missing")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  bool start_head = false;
  std::string labels;
  std::string resources;
  troupe::cli::StartHeadOptions head;
  troupe::cli::StartAgentOptions agent;
  CLI::App* start_cmd = app.add_subcommand(
      "start",
      "start this host's daemon of a standing cluster: the head (--head) or an agent that joins "
      "a head (--address HOST:PORT)");
  CLI::Option* head_flag =
      start_cmd->add_flag("--head", start_head, "start the head (cluster state and placement)");
  CLI::Option* address_opt =
      start_cmd->add_option("--address", agent.address, "HOST:PORT of the head to join");
  head_flag->excludes(address_opt);
  start_cmd->add_option("--node-ip-address", head.node_ip_address,
                        "the address to bind and advertise (default: this host's primary one)");
  start_cmd->add_option("--port", head.port, "the head's port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  start_cmd
      ->add_option("--token-file", head.token_file,
                   "the cluster token (default: TROUPE_TOKEN; the head makes a new one)")
      ->check(CLI::ExistingFile);
  start_cmd->add_flag("--tls", head.tls,
                      "the head: encrypt every TCP connection of the cluster with TLS, "
                      "certificates of a cluster CA made in the run directory");
  start_cmd->add_option("--tls-dir", agent.tls_dir,
                        "the cluster's TLS directory (the head printed it; for the head: your "
                        "own CA, ca.pem with head.pem/head.key or ca.key; default: "
                        "TROUPE_TLS_DIR)");
  start_cmd->add_option("--num-cpus", agent.num_cpus, "CPUs this host offers (default: cores)")
      ->check(CLI::NonNegativeNumber);
  start_cmd
      ->add_option(
          "--num-gpus", agent.num_gpus,
          "GPUs this host offers (default: CUDA_VISIBLE_DEVICES, else NVML's count, else none)")
      ->check(CLI::NonNegativeNumber);
  start_cmd->add_option("--labels", labels, "host labels, k=v,k=v");
  start_cmd->add_option("--resources", resources,
                        "custom resources this host offers, NAME=AMOUNT,... (carried as the "
                        "labels resource:NAME=AMOUNT; troupe.ray's options(resources=) asks for "
                        "them)");
  start_cmd
      ->add_option("--object-store-memory", agent.object_store_memory,
                   "bytes of this host's object store (default: 30% of MemTotal)")
      ->check(CLI::NonNegativeNumber);
  start_cmd->add_option("--host-name", agent.host_name, "this host's name (default: hostname)");
  start_cmd->add_option("--python-preload", agent.python_preload,
                        "modules this host's Python fork servers import before forking Python "
                        "workers, comma-separated (default: TROUPE_PYTHON_PRELOAD)");
  start_cmd->add_flag("--block", head.block, "stay in the foreground");
  start_cmd
      ->add_option("--heartbeat-ms", head.heartbeat_ms,
                   "heartbeat interval between the head, agents and drivers")
      ->check(CLI::Range(10, 60000))
      ->capture_default_str();
  start_cmd
      ->add_option("--host-lost-ms", head.host_lost_ms,
                   "a peer silent this long is lost (a host for the head, a driver for an agent)")
      ->check(CLI::Range(50, 600000))
      ->capture_default_str();
  start_cmd
      ->add_option("--restore-grace-ms", head.restore_grace_ms,
                   "head restarted on its run directory: how long a driver has to book its "
                   "placement groups again before the head releases them")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();

  start_cmd
      ->add_option("--metrics-port", head.metrics_port,
                   "serve Prometheus metrics on http://NODE-IP:PORT/metrics to bearers of the "
                   "cluster token (0: any free port, printed)")
      ->check(CLI::Range(0, 65535));
  start_cmd
      ->add_option("--dashboard-port", head.dashboard_port,
                   "the head only: serve the web dashboard on http://NODE-IP:PORT/ to bearers of "
                   "the cluster token (0: any free port; the URL to log in once is printed)")
      ->check(CLI::Range(0, 65535));
  start_cmd->add_flag("--slurm", agent.slurm,
                      "an agent in a Slurm job step (as `troupe slurm` starts them): host name, "
                      "address, CPUs and GPUs from Slurm unless given; exits with its head");

  troupe::cli::SlurmOptions slurm;
  CLI::App* slurm_cmd = app.add_subcommand(
      "slurm",
      "inside a Slurm allocation (sbatch, salloc): start a head here and an agent on every node "
      "(one srun step), run DRIVER with TROUPE_ADDRESS and TROUPE_TOKEN, stop everything when "
      "it ends; usage: troupe slurm [options] -- DRIVER ARGS...");
  slurm_cmd->prefix_command();  // DRIVER ARGS... are left as they are
  slurm_cmd->add_option("--node-ip-address", slurm.node_ip_address,
                        "the head's address (default: this node's NodeAddr in Slurm)");
  slurm_cmd->add_option("--port", slurm.port, "the head's port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  slurm_cmd
      ->add_option("--timeout", slurm.timeout_s,
                   "seconds for every node's agent to register with the head")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  slurm_cmd->add_option("--agent-binary", slurm.agent_binary,
                        "the troupe executable each node runs as its agent (default: this one)");
  slurm_cmd
      ->add_option("--stop-grace", slurm.stop_grace_s,
                   "seconds from SIGTERM to SIGKILL for the driver once troupe slurm is stopped")
      ->check(CLI::Range(0, 600))
      ->capture_default_str();

  CLI::App* stop_cmd =
      app.add_subcommand("stop", "stop this host's standing-cluster daemons and their workers");

  CLI::App* version_cmd = app.add_subcommand("version", "print the version");

  std::string known;
  bool is_command = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    known += (known.empty() ? "" : ", ") + sub->get_name();
    is_command = is_command || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !is_command) {
    std::fprintf(stderr, "troupe: unknown command '%s' (commands: %s; see troupe --help)\n",
                 argv[1], known.c_str());
    return 2;
  }
  // `troupe slurm [options] -- DRIVER ARGS...`: what follows the first `--` is the driver's,
  // never parsed here.
  std::vector<std::string> driver_after_dashes;
  bool split_at_dashes = false;
  if (argc > 1 && std::string(argv[1]) == "slurm")
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "--") {
        driver_after_dashes.assign(argv + i + 1, argv + argc);
        split_at_dashes = true;
        argc = i;
        break;
      }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, the version, or the error and a hint
    return code == 0 ? 0 : 2;
  }
  if (*demo_cmd) return troupe::cli::run_demo(demo);
  if (*status_cmd || *logs_cmd || *stack_cmd || *timeline_cmd) {
    try {  // the clients of this host's standing cluster speak its TLS
      troupe::cli::use_standing_tls();
    } catch (const troupe::Error& e) {
      std::fprintf(stderr, "troupe: %s\n", e.what());
      return 1;
    }
  }
  if (*status_cmd) {
    if (status_address.empty()) return troupe::cli::run_status(session);
    try {
      return troupe::cli::run_status("", status_address,
                                     troupe::cli::standing_token(status_token_file));
    } catch (const troupe::Error& e) {
      std::fprintf(stderr, "troupe status: %s\n", e.what());
      return 1;
    }
  }
  if (*logs_cmd) return troupe::cli::run_logs(logs);
  if (*stack_cmd) return troupe::cli::run_stack(stack);
  if (*timeline_cmd) return troupe::cli::run_timeline(timeline);
  if (*start_cmd) {
    if (start_head == !agent.address.empty()) {
      std::fprintf(stderr, "troupe start: give --head or --address HOST:PORT (see --help)\n");
      return 2;
    }
    if (agent.slurm && start_head) {
      std::fprintf(stderr, "troupe start: --slurm is for an agent (--address), not the head\n");
      return 2;
    }
    if (!start_head && head.dashboard_port >= 0) {
      std::fprintf(stderr,
                   "troupe start: --dashboard-port is for the head (--head), not an agent\n");
      return 2;
    }
    if (!start_head && head.tls) {
      std::fprintf(stderr,
                   "troupe start: --tls is for the head (--head); an agent takes --tls-dir\n");
      return 2;
    }
    head.tls_dir = agent.tls_dir;
    if (start_head) return troupe::cli::run_start_head(head);
    std::stringstream ss(labels);
    for (std::string kv; std::getline(ss, kv, ',');) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "--labels: '%s' is not k=v\n", kv.c_str());
        return 2;
      }
      agent.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    std::stringstream rs(resources);
    for (std::string kv; std::getline(rs, kv, ',');) {
      auto eq = kv.find('=');
      std::string name = kv.substr(0, eq);
      double amount = -1;
      if (eq != std::string::npos) {
        const std::string text = kv.substr(eq + 1);
        char* end = nullptr;
        amount = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0') amount = -1;
      }
      bool name_ok = !name.empty() && name.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_.-/") == std::string::npos;
      if (eq == std::string::npos || !name_ok || !(amount >= 0) || name == "CPU" || name == "GPU") {
        std::fprintf(stderr,
                     "--resources: '%s' is not NAME=AMOUNT (a name of letters, digits and _.-/ "
                     "other than CPU and GPU, and an amount >= 0)\n",
                     kv.c_str());
        return 2;
      }
      agent.labels[std::string(troupe::kResourceLabelPrefix) + name] = kv.substr(eq + 1);
    }
    agent.node_ip_address = head.node_ip_address;
    agent.token_file = head.token_file;
    agent.block = head.block;
    agent.heartbeat_ms = head.heartbeat_ms;
    agent.host_lost_ms = head.host_lost_ms;
    agent.metrics_port = head.metrics_port;
    return troupe::cli::run_start_agent(agent);
  }
  if (*slurm_cmd) {
    slurm.driver = slurm_cmd->remaining();  // DRIVER ARGS... given without `--`
    if (!slurm.driver.empty() && slurm.driver.front().rfind("-", 0) == 0) {
      std::fprintf(stderr, "troupe slurm: unknown option '%s' (see troupe slurm --help)\n",
                   slurm.driver.front().c_str());
      return 2;
    }
    // A `--` after the driver's name is the driver's own: give it back.
    if (!slurm.driver.empty() && split_at_dashes) slurm.driver.push_back("--");
    slurm.driver.insert(slurm.driver.end(), driver_after_dashes.begin(), driver_after_dashes.end());
    if (slurm.driver.empty()) {
      std::fprintf(
          stderr,
          "troupe slurm: give the driver to run: troupe slurm [options] -- DRIVER ARGS...\n");
      return 2;
    }
    return troupe::cli::run_slurm(slurm);
  }
  if (*stop_cmd) return troupe::cli::run_stop();
  if (*version_cmd) {
    std::printf("troupe %s\n", troupe::version());
    return 0;
  }
  return 2;
}
