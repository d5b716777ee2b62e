// The troupe command. Parsed with CLI11: every subcommand has --help, and a bad or missing value
// is an error naming the option (exit code 2).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/demo.h"
#include "cli/status.h"
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

  std::string session;
  CLI::App* status_cmd = app.add_subcommand(
      "status", "hosts, reservations, worker groups' memory and workers of a running cluster");
  status_cmd->add_option("--session", session,
                         "the cluster's session directory (default: this user's newest)");

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, the version, or the error and a hint
    return code == 0 ? 0 : 2;
  }
  if (*demo_cmd) return troupe::cli::run_demo(demo);
  if (*status_cmd) return troupe::cli::run_status(session);
  if (*version_cmd) {
    std::printf("troupe %s\n", troupe::version());
    return 0;
  }
  return 2;
}
