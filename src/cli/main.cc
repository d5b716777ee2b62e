// The troupe command.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/demo.h"
#include "cli/status.h"
#include "troupe/troupe.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: troupe COMMAND\n"
               "\n"
               "commands:\n"
               "  demo [--hosts N] [--hold S]\n"
               "                     start an embedded cluster, run workers on every host, call\n"
               "                     them, print results and timings, shut everything down\n"
               "  status [--session DIR]\n"
               "                     hosts, reservations, worker groups' memory and workers of a\n"
               "                     running cluster (default: the newest session of this user)\n"
               "  version            print the version\n"
               "  help               print this message\n");
}

}  // namespace

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "version" || cmd == "--version") {
    std::printf("troupe %s\n", troupe::version());
    return 0;
  }
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    usage(stdout);
    return 0;
  }
  if (cmd == "demo") return troupe::cli::run_demo(argc - 2, argv + 2);
  if (cmd == "status") return troupe::cli::run_status(argc - 2, argv + 2);
  std::fprintf(stderr, "troupe: unknown command '%s'\n\n", cmd.c_str());
  usage(stderr);
  return 2;
}
