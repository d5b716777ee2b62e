// The troupe command's parsing, run as a user would: every subcommand has --help, and a bad or
// missing value is an error naming the option, with exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "test_util.h"

namespace {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs the troupe command with `args`; with `env_first`, `args` starts with VAR=value
// assignments for its environment.
CliRun troupe(const std::string& args, bool env_first = false) {
  CliRun r;
  std::string command;
  if (env_first) {
    // Split "A=1 B=2 rest" into the assignments and the arguments.
    size_t pos = 0;
    while (true) {
      size_t space = args.find(' ', pos);
      std::string word = args.substr(pos, space - pos);
      if (word.find('=') == std::string::npos || word[0] == '-') break;
      command += word + " ";
      pos = space + 1;
    }
    command = "env " + command + TROUPE_CLI_PATH + " " + args.substr(pos);
  } else {
    command = std::string(TROUPE_CLI_PATH) + " " + args;
  }
  command += " 2>&1 </dev/null";
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

// An agent's GPUs come from CUDA_VISIBLE_DEVICES when --num-gpus is not given; one that is not
// a list of indexes is an error saying what to do, before anything starts.
TEST(Cli, AgentRejectsCudaVisibleDevicesItCannotRead) {
  CliRun r = troupe(
      "CUDA_VISIBLE_DEVICES=GPU-8f2c TROUPE_TOKEN=t start --address 127.0.0.1:9 --block", true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output,
             "CUDA_VISIBLE_DEVICES='GPU-8f2c' is not a list of GPU indexes; give --num-gpus");
}

TEST(Cli, UnknownOrMissingCommand) {
  CliRun r = troupe("bogus");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(
      r.output,
      "unknown command 'bogus' (commands: demo, status, logs, stack, timeline, start, slurm, "
      "stop, "
      "version");
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
  r = troupe("logs --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "--tail");
  EXPECT_HAS(r.output, "--follow");
  r = troupe("logs");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "WORKER_OR_GROUP is required");
  r = troupe("logs w --tail 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--tail");
  r = troupe("timeline --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "--output");
  EXPECT_HAS(r.output, "--timeout");
  r = troupe("timeline --timeout 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--timeout");
  r = troupe("start --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "--num-gpus");
  EXPECT_HAS(r.output, "--node-ip-address");
  r = troupe("slurm --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "--timeout");
  EXPECT_HAS(r.output, "--agent-binary");
  EXPECT_HAS(r.output, "-- DRIVER ARGS...");
  r = troupe("stop --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = troupe("version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "troupe 0.");
}

// A standing cluster on this machine, driven as a user would: a head on a free port, two agents
// with their own addresses and resources, status by address, a wrong token refused, and stop
// leaving no daemon behind. TMPDIR is a fresh directory, so its run directory is this test's.
TEST(Cli, StandingClusterStartStatusStop) {
  char dir[] = "/tmp/troupe-cli-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string env = std::string("TMPDIR=") + dir + " ";
  CliRun r = troupe("start");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "give --head or --address HOST:PORT");

  r = troupe(env + "start --head --node-ip-address 127.0.0.1 --port 0", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string marker = "troupe head started at ";
  size_t at = r.output.find(marker);
  ASSERT_NE(at, std::string::npos) << r.output;
  std::string address = r.output.substr(at + marker.size());
  address = address.substr(0, address.find(' '));
  const std::string join = "troupe start --address " + address + " --token-file ";
  at = r.output.find(join);
  ASSERT_NE(at, std::string::npos) << r.output;
  std::string token_file = r.output.substr(at + join.size());
  token_file = token_file.substr(0, token_file.find_first_of(" \n"));

  r = troupe(env + "start --address " + address +
                 " --node-ip-address 127.0.0.31 --host-name alpha --num-gpus 2 --num-cpus 3",
             true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "troupe agent of alpha (127.0.0.31, 3 CPUs, 2 GPUs) joined " + address);
  r = troupe(env + "start --address " + address + " --token-file " + token_file +
                 " --node-ip-address 127.0.0.32 --host-name beta --num-gpus 0 --labels rack=r1",
             true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // From a run directory that holds no token (as on another host): the token file given.
  char other[] = "/tmp/troupe-cli-other-XXXXXX";
  ASSERT_NE(::mkdtemp(other), nullptr);
  r = troupe(std::string("TMPDIR=") + other + " status --address " + address + " --token-file " +
                 token_file,
             true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "beta       127.0.0.32");
  ::rmdir(other);

  r = troupe(env + "status --address " + address, true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "alpha      127.0.0.31");
  EXPECT_HAS(r.output, "3.0 CPUs, 2 GPUs");
  EXPECT_HAS(r.output, "beta       127.0.0.32");
  EXPECT_HAS(r.output, " up ");
  r = troupe(env + "TROUPE_TOKEN=not-the-token status --address " + address, true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "wrong cluster token");
  r = troupe(env + "start --labels nolabel --address " + address, true);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--labels: 'nolabel' is not k=v");
  for (const char* bad : {"tag", "tag=", "tag=-1", "tag=2x", "CPU=4", "=3", "a b=1"}) {
    r = troupe(env + "start --resources '" + bad + "' --address " + address, true);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_HAS(r.output, std::string("--resources: '") + bad + "' is not NAME=AMOUNT");
  }

  r = troupe(env + "stop", true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "stopping agent-alpha");
  EXPECT_HAS(r.output, "stopping head");
  EXPECT_HAS(r.output, "3 troupe daemon(s) stopped");
  // Nothing listens any more: an agent cannot join.
  r = troupe(env + "start --address " + address + " --host-name late --node-ip-address 127.0.0.33",
             true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "no cluster token");  // the head removed the token it made
  std::system((std::string("rm -rf ") + dir).c_str());
}

// `troupe slurm` outside an allocation and with bad arguments: clear errors, nothing started.
// (Inside an allocation it is tested on real Slurm daemons: tests/slurm/troupe_slurm_test.sh.)
TEST(Cli, SlurmOutsideAnAllocationAndBadArguments) {
  CliRun r = troupe("SLURM_JOB_ID= SLURM_JOB_NODELIST= slurm -- /bin/true", true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "not inside a Slurm allocation: SLURM_JOB_ID or SLURM_JOB_NODELIST");
  r = troupe("slurm --timeout 5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "give the driver to run: troupe slurm [options] -- DRIVER ARGS...");
  r = troupe("slurm --bogus -- /bin/true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "unknown option '--bogus'");
  r = troupe("slurm --timeout 0 -- /bin/true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--timeout");
  r = troupe("SLURM_JOB_ID= start --address 127.0.0.1:1 --block --slurm", true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, "--slurm: SLURM_JOB_ID is not set");
  r = troupe("start --head --slurm");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "--slurm is for an agent");
}

}  // namespace
