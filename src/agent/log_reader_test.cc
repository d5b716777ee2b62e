// Pieces of a log file (log_reader.h): tails, offsets, line ends, and the bound on what one
// piece holds whatever the file or the request.
#include "agent/log_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace {

using troupe::Error;
using troupe::agent::LogPiece;
using troupe::agent::read_log_piece;
using troupe::wire::control::ReadLog;

class LogReaderTest : public testing::Test {
 protected:
  LogReaderTest() {
    char tmpl[] = "/tmp/troupe-logreader-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  ~LogReaderTest() override {
    ::close(dir_fd_);
    std::system(("rm -rf " + dir_).c_str());
  }
  void write(const std::string& name, const std::string& content) {
    int fd = ::openat(dir_fd_, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    ::close(fd);
  }
  LogPiece read(const std::string& name, int64_t offset, int64_t tail, int64_t max_bytes) {
    return read_log_piece(dir_fd_, name, "logs/" + name, ReadLog{"w", offset, tail, max_bytes});
  }
  std::string dir_;
  int dir_fd_ = -1;
};

TEST_F(LogReaderTest, TailGivesTheLastLines) {
  write("w.log", "one\ntwo\nthree\nfour\n");  // 19 bytes
  LogPiece p = read("w.log", 0, 2, 4096);
  EXPECT_EQ(p.data, "three\nfour\n");
  EXPECT_EQ(p.offset, 8);
  EXPECT_EQ(p.next_offset, 19);
  EXPECT_EQ(p.size, 19);
  EXPECT_EQ(read("w.log", 0, 10, 4096).data, "one\ntwo\nthree\nfour\n");  // fewer lines than asked
  // Within the last 12 bytes ("\nthree\nfour\n"): only whole lines.
  EXPECT_EQ(read("w.log", 0, 10, 12).data, "three\nfour\n");
}

TEST_F(LogReaderTest, FromAnOffsetEndsAtALineEnd) {
  write("w.log", "one\ntwo\nthree\nfour\n");
  LogPiece p = read("w.log", 4, 0, 7);  // "two\nthr" -> "two\n"
  EXPECT_EQ(p.data, "two\n");
  EXPECT_EQ(p.offset, 4);
  EXPECT_EQ(p.next_offset, 8);
  p = read("w.log", 8, 0, 4096);
  EXPECT_EQ(p.data, "three\nfour\n");
  EXPECT_EQ(p.next_offset, 19);
  // At or past the end: nothing, and the next piece starts at the end.
  p = read("w.log", 500, 0, 4096);
  EXPECT_EQ(p.data, "");
  EXPECT_EQ(p.offset, 19);
  EXPECT_EQ(p.next_offset, 19);
}

TEST_F(LogReaderTest, APieceNeverHoldsMoreThanMaxBytes) {
  std::string long_line(3000, 'x');
  write("w.log", long_line + "\nshort\n");
  LogPiece p = read("w.log", 0, 0, 1000);  // one line longer than a piece: cut inside it
  EXPECT_EQ(p.data, std::string(1000, 'x'));
  EXPECT_EQ(p.next_offset, 1000);
  EXPECT_EQ(read("w.log", 0, 5, 1000).data, "short\n");
  // The largest piece the request allows (kMaxBytes) is still bounded on a larger file.
  write("big.log", std::string(ReadLog::kMaxBytes + 5000, 'y') + "\n");
  EXPECT_EQ(read("big.log", 0, 0, ReadLog::kMaxBytes).data.size(),
            static_cast<size_t>(ReadLog::kMaxBytes));
}

TEST_F(LogReaderTest, RefusesSymbolicLinksAndMissingFiles) {
  write("real.log", "secret\n");
  ASSERT_EQ(::symlinkat("real.log", dir_fd_, "link.log"), 0);
  try {
    read("link.log", 0, 0, 100);
    FAIL() << "a symbolic link was followed";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("cannot open log file logs/link.log"), std::string::npos)
        << e.message();
  }
  try {
    read("gone.log", 0, 0, 100);
    FAIL() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("cannot open log file logs/gone.log: No such file"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
