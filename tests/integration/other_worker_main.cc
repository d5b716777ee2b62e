// A worker executable other than the test binary, for the class -> executable registry
// (ClusterOptions::executables). It registers its own class, OtherWorker, which reports where it
// runs: its executable, its command line and the OTHER_ENV variable.
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "troupe/troupe.h"

namespace {

std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}

class OtherWorker {
 public:
  std::map<std::string, std::string> where() {
    std::map<std::string, std::string> out;
    const auto& args = command_line();
    out["argv0"] = args.empty() ? "" : args[0];
    std::string rest;
    for (size_t i = 1; i < args.size(); ++i) rest += (i > 1 ? " " : "") + args[i];
    out["args"] = rest;
    const char* v = std::getenv("OTHER_ENV");
    out["OTHER_ENV"] = v ? v : "(unset)";
    return out;
  }
};

TROUPE_WORKER_CLASS(OtherWorker, cls) { cls.method("where", &OtherWorker::where); }

}  // namespace

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) command_line().push_back(argv[i]);
  troupe::init(argc, argv);
  return 0;
}
