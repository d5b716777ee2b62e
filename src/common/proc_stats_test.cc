// proc::read_kernel_file: whole files, and no exception on a read error (an agent that read a
// cgroup removed meanwhile through an ifstream died of std::ios_base::failure).
#include "common/proc_stats.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace troupe::proc {
namespace {

class ReadKernelFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/troupe-proc-stats-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ReadKernelFile, ReadsAFileLargerThanOneReadWhole) {
  // 10,000 bytes: more than one 4 KiB read, with a byte pattern that shows a lost or repeated
  // chunk.
  std::string content;
  for (int i = 0; i < 10000; ++i) content.push_back(static_cast<char>('a' + i % 23));
  std::ofstream(dir_ + "/file", std::ios::binary) << content;
  EXPECT_EQ(read_kernel_file(dir_ + "/file"), content);
}

TEST_F(ReadKernelFile, ReadsAProcFile) {
  std::string status = read_kernel_file("/proc/self/status");
  EXPECT_NE(status.find("Pid:\t" + std::to_string(::getpid()) + "\n"), std::string::npos) << status;
}

TEST_F(ReadKernelFile, AMissingFileIsEmpty) { EXPECT_EQ(read_kernel_file(dir_ + "/missing"), ""); }

TEST_F(ReadKernelFile, AReadErrorIsTheTextReadSoFarNotAnException) {
  // A directory opens read-only and then fails every read (EISDIR): the same path through the
  // code as a cgroup file whose cgroup was removed after the open (ENODEV).
  ASSERT_EQ(::mkdir((dir_ + "/sub").c_str(), 0700), 0);
  std::string text = "not empty";
  EXPECT_NO_THROW(text = read_kernel_file(dir_ + "/sub"));
  EXPECT_EQ(text, "");
}

}  // namespace
}  // namespace troupe::proc
