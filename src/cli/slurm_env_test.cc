// slurm_env: what an agent of `troupe slurm` reads from Slurm's variables and commands.
#include "cli/slurm_env.h"

#include <gtest/gtest.h>

#include "troupe/error.h"

namespace troupe::cli::slurm {
namespace {

using Ids = std::vector<int>;

TEST(SlurmEnv, GpusFromCudaVisibleDevicesFirst) {
  auto g = gpus_from_env(
      {{"CUDA_VISIBLE_DEVICES", "2,3"}, {"SLURM_STEP_GPUS", "0,1"}, {"SLURM_GPUS_ON_NODE", "4"}});
  EXPECT_EQ(g.ids, (Ids{2, 3}));
  EXPECT_EQ(g.source, "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(gpus_from_env({{"CUDA_VISIBLE_DEVICES", " 0 , 5 "}}).ids, (Ids{0, 5}));
}

TEST(SlurmEnv, GpusFromStepGpusWhenCudaVisibleDevicesIsUnsetEmptyOrUuids) {
  for (const char* cuda : {"", "GPU-8f1c2a3b-0000-1111-2222-333344445555", "NoDevFiles"}) {
    auto g = gpus_from_env({{"CUDA_VISIBLE_DEVICES", cuda}, {"SLURM_STEP_GPUS", "1,3"}});
    EXPECT_EQ(g.ids, (Ids{1, 3})) << cuda;
    EXPECT_EQ(g.source, "SLURM_STEP_GPUS") << cuda;
  }
  EXPECT_EQ(gpus_from_env({{"SLURM_STEP_GPUS", "7"}}).ids, (Ids{7}));
}

TEST(SlurmEnv, GpusFromTheCountOnTheNodeLast) {
  auto g = gpus_from_env({{"SLURM_GPUS_ON_NODE", "3"}});
  EXPECT_EQ(g.ids, (Ids{0, 1, 2}));
  EXPECT_EQ(g.source, "SLURM_GPUS_ON_NODE");
  EXPECT_EQ(gpus_from_env({{"SLURM_GPUS_ON_NODE", "0"}}).ids, Ids{});
}

TEST(SlurmEnv, NoGpuVariablesMeansNoGpus) {
  auto g = gpus_from_env({{"SLURM_CPUS_ON_NODE", "8"}});
  EXPECT_TRUE(g.ids.empty());
  EXPECT_EQ(g.source, "");
  // An empty CUDA_VISIBLE_DEVICES with nothing else: Slurm gave no GPU.
  g = gpus_from_env({{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_TRUE(g.ids.empty());
  EXPECT_EQ(g.source, "CUDA_VISIBLE_DEVICES");
}

TEST(SlurmEnv, BadGpuValuesAreErrorsNamingTheVariable) {
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"CUDA_VISIBLE_DEVICES", "0,x"},
                                                        {"CUDA_VISIBLE_DEVICES", "-1"},
                                                        {"SLURM_STEP_GPUS", "0,,1"},
                                                        {"SLURM_STEP_GPUS", "0,"},
                                                        {"SLURM_GPUS_ON_NODE", "two"}}) {
    try {
      gpus_from_env({{name, value}});
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(e.message().find(name), std::string::npos) << e.what();
    }
  }
}

TEST(SlurmEnv, CpusOnNode) {
  EXPECT_EQ(cpus_from_env({{"SLURM_CPUS_ON_NODE", "16"}}), 16);
  EXPECT_EQ(cpus_from_env({}), 0);
  EXPECT_THROW(cpus_from_env({{"SLURM_CPUS_ON_NODE", "0"}}), Error);
  EXPECT_THROW(cpus_from_env({{"SLURM_CPUS_ON_NODE", "2x"}}), Error);
}

TEST(SlurmEnv, IndexLists) {
  EXPECT_EQ(parse_index_list(""), Ids{});
  EXPECT_EQ(parse_index_list("0"), (Ids{0}));
  EXPECT_EQ(parse_index_list("0,1,3"), (Ids{0, 1, 3}));
  EXPECT_EQ(parse_index_list("0-2,5"), (Ids{0, 1, 2, 5}));
  EXPECT_FALSE(parse_index_list("3-1"));
  EXPECT_FALSE(parse_index_list("1-"));
  EXPECT_FALSE(parse_index_list("a"));
}

TEST(SlurmEnv, NodeAddrFromScontrol) {
  const std::string out =
      "NodeName=n1 Arch=x86_64 CoresPerSocket=1\n"
      "   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.10\n"
      "   NodeAddr=127.0.0.11 NodeHostName=box Version=22.05.8\n"
      "   ActiveFeatures=(null)\n";
  EXPECT_EQ(scontrol_field(out, "NodeAddr"), "127.0.0.11");
  EXPECT_EQ(scontrol_field(out, "NodeName"), "n1");
  EXPECT_EQ(scontrol_field(out, "ActiveFeatures"), "");  // (null)
  EXPECT_EQ(scontrol_field(out, "Features"), "");        // only whole keys
  EXPECT_EQ(scontrol_field(out, "Gres"), "");
}

// NodeAddr may be a host name (it defaults to the node's name): agents bind an IPv4 address.
TEST(SlurmEnv, AddressesResolveToIpv4) {
  EXPECT_EQ(resolve_ipv4("127.0.0.11"), "127.0.0.11");
  EXPECT_EQ(resolve_ipv4("localhost"), "127.0.0.1");
  EXPECT_EQ(resolve_ipv4("no-such-host.invalid"), "");
  EXPECT_EQ(resolve_ipv4(""), "");
}

TEST(SlurmEnv, HostnamesOutputLines) {
  EXPECT_EQ(split_lines("n1\nn2\n\n  gpu07 \n"), (std::vector<std::string>{"n1", "n2", "gpu07"}));
}

TEST(SlurmEnv, CommandOutputAndExitCode) {
  auto r = run_command({"sh", "-c", "echo one; echo two; exit 3"});
  EXPECT_EQ(r.output, "one\ntwo\n");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THROW(run_command({"sleep", "5"}, 100), Error);
  EXPECT_THROW(run_command({"/nonexistent/scontrol"}), Error);
}

}  // namespace
}  // namespace troupe::cli::slurm
