// The troupe command's parsing, run as a user would: every subcommand has --help, and a bad or
// missing value is an error naming the option, with exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_util.h"

namespace {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CliRun troupe(const std::string& args) {
  CliRun r;
  std::string command = std::string(TROUPE_CLI_PATH) + " " + args + " 2>&1 </dev/null";
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(Cli, BadValuesAreErrorsNamingTheOption) {
  CliRun r = troupe("demo --hosts abc");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--hosts: Failed parsing abc");
  r = troupe("demo --hosts 3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--hosts: 3 not in {1,2,4}");
  r = troupe("demo --hold");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--hold");
  r = troupe("demo --hold -1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = troupe("status --sesion /tmp");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--sesion");
}

TEST(Cli, UnknownOrMissingCommand) {
  CliRun r = troupe("bogus");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "unknown command 'bogus' (commands: demo, status, version");
  r = troupe("");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "A subcommand is required");
}

TEST(Cli, HelpForEverySubcommand) {
  CliRun r = troupe("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "demo");
  EXPECT_HAS(r.output, "status");
  r = troupe("demo --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "--hosts");
  EXPECT_HAS(r.output, "--hold");
  r = troupe("status --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "--session");
  r = troupe("version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "troupe 0.");
}

}  // namespace
