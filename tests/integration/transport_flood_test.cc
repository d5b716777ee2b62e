// Bounded cost before (and after) authentication, against a real server process
// (troupe_test_flood_server) that runs with the common limit of 1024 open files:
//
//   - 100 authenticated peers each declare a 64 MiB frame (even ones a 64 MiB body, odd ones a
//     64 MiB attachment), send 1000 bytes of it and stop;
//   - 5,000 connections are opened and never say a word.
//
// Checked: the server's peak RSS (VmHWM) grows by less than kRssBound over its RSS before the
// attack (the old code allocated every declared size up front: 100 x 64 MiB, and a 64 KiB
// buffer per silent connection); a peer that was connected before keeps getting answers during
// and after the attack; the stalled frames are closed after the frame stall deadline; once the
// silent connections go away a new client connects and is served; the server's log stays short
// (the old code logged millions of accept failures once it ran out of descriptors).
//
// A second test runs the server with 64 open files, so that accept fails (EMFILE): the listener
// must back off and log rarely, and keep serving (the old code retried at once, logging each).
//
// The numbers are printed; run `build/tests/transport_flood_test` to see them.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include "test_util.h"
#include "transport/transport_test_util.h"

namespace troupe::transport::testing {
namespace {

constexpr int kSilent = 5000;
constexpr int kStalled = 100;
constexpr uint32_t kDeclared = 64u << 20;  // the default FrameLimits::max_body
constexpr int kStallMs = 3000;             // the server's frame stall deadline in this test
// Growth of the server's peak RSS over its RSS before the attack. What the server may hold at
// once: 100 authenticated connections x (64 KiB read buffer + at most 64 KiB of a frame part
// before its bytes arrive) = 12.5 MiB, plus 256 pending handshakes x a few KiB; measured 11.7
// MiB (release). The old code needed 64 MiB per stalled body: over 3 GiB here. The sanitizer
// builds add to each byte the program touches: ASan redzones and quarantine (measured 63 MiB
// since every connection at the handshake cap is admitted and an older one evicted, LST-4: the
// evicted connections' buffers stay in ASan's quarantine), TSan shadow memory (measured 58 MiB).
#if defined(__SANITIZE_THREAD__)
constexpr long kRssBoundKiB = 128 * 1024;
#elif defined(__SANITIZE_ADDRESS__)
constexpr long kRssBoundKiB = 96 * 1024;
#else
constexpr long kRssBoundKiB = 32 * 1024;
#endif
// Lines the server may log: one per stalled frame it closes, plus a few rate-limited ones.
constexpr size_t kMaxLogLines = kStalled + 50;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t count_lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

long status_kib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

// The server process: stdin is a pipe it serves until EOF, stdout tells the endpoint, stderr
// goes to a file.
class FloodServer {
 public:
  FloodServer(const std::string& log_path, rlim_t max_files) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    std::string stall = std::to_string(kStallMs);
    pid_ = ::fork();
    if (pid_ == 0) {
      rlimit nofile{max_files, max_files};
      ::setrlimit(RLIMIT_NOFILE, &nofile);
      int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(log_fd, 2);
      const char* argv[] = {TROUPE_TEST_FLOOD_SERVER, "tcp:127.0.0.1:0", kToken.c_str(),
                            stall.c_str(), nullptr};
      ::execv(argv[0], const_cast<char**>(argv));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~FloodServer() {
    if (stdin_ >= 0) ::close(stdin_);
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0) ::close(stdout_);
  }
  pid_t pid() const { return pid_; }

  // The endpoint line, or "" if none came within the deadline.
  std::string endpoint() {
    std::string text;
    auto deadline = Clock::now() + 20s;
    while (text.find('\n') == std::string::npos && Clock::now() < deadline) {
      pollfd p{stdout_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      ssize_t n = ::read(stdout_, buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    if (text.rfind("endpoint ", 0) != 0 || text.find('\n') == std::string::npos) return "";
    return text.substr(9, text.find('\n') - 9);
  }

  // Closes its stdin and waits (with a deadline) for a clean exit.
  bool stop() {
    ::close(stdin_);
    stdin_ = -1;
    int status = 0;
    bool exited = eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, 20s);
    reaped_ = exited;
    return exited && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  bool reaped_ = false;
};

// Raises this process's limit of open files to the hard limit; false if that is below `need`.
bool raise_file_limit(rlim_t need) {
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_max < need) return false;
  nofile.rlim_cur = nofile.rlim_max;
  return ::setrlimit(RLIMIT_NOFILE, &nofile) == 0;
}

// A TCP connection opened without waiting for the server to accept it.
int connect_nonblocking(const std::string& endpoint) {
  auto colon = endpoint.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  ::inet_pton(AF_INET, endpoint.substr(4, colon - 4).c_str(), &a.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class Client {
 public:
  explicit Client(const std::string& endpoint) : endpoint_(endpoint) {}
  ~Client() {
    if (peer_) peer_->close(Error(ErrorCode::kShutdown, "test over"));
    loop_.run_sync([] {});
    loop_.stop();
  }
  // Connects and authenticates with the real client; false on error or after the deadline.
  bool connect() {
    auto p = std::make_shared<std::promise<std::shared_ptr<RpcPeer>>>();
    async_connect(loop_.context(), endpoint_, kToken, kDeadline,
                  [p](std::shared_ptr<Connection> c, const Error* e) {
                    p->set_value(e ? nullptr : RpcPeer::attach(c, wire::FrameLimits{}, {}));
                  });
    auto f = p->get_future();
    if (f.wait_for(kDeadline + 1s) != std::future_status::ready) return false;
    peer_ = f.get();
    return peer_ != nullptr;
  }
  ::testing::AssertionResult echo(int n) {
    Map kwargs{{"n", n}};
    auto f = peer_->call("echo", kwargs, "echo");
    if (!f.wait_for(kDeadline)) return ::testing::AssertionFailure() << "echo " << n << " hung";
    if (auto e = f.error()) return ::testing::AssertionFailure() << e->what();
    if (f.get() != Value(kwargs)) return ::testing::AssertionFailure() << "wrong echo";
    return ::testing::AssertionSuccess();
  }

 private:
  std::string endpoint_;
  IoLoop loop_;
  std::shared_ptr<RpcPeer> peer_;
};

TEST(TransportFlood, SilentAndStalledPeersCostBoundedMemoryAndLogLines) {
  ASSERT_TRUE(raise_file_limit(kSilent + kStalled + 200))
      << "this test holds " << kSilent << " client sockets; raise the hard limit of open files";

  TempDir dir;
  std::string log_path = dir.path() + "/server.log";
  FloodServer server(log_path, 1024);  // the common default limit of a service
  ASSERT_GT(server.pid(), 0);
  std::string endpoint = server.endpoint();
  ASSERT_FALSE(endpoint.empty()) << "the flood server did not start";

  Client good(endpoint);
  ASSERT_TRUE(good.connect());
  ASSERT_TRUE(good.echo(0));
  long rss_before = status_kib(server.pid(), "VmRSS");
  ASSERT_GT(rss_before, 0);
  auto attack_start = Clock::now();

  // 100 authenticated peers declare 64 MiB and stop after 1000 bytes.
  std::vector<std::unique_ptr<RawSocket>> stalled;
  for (int i = 0; i < kStalled; ++i) {
    auto raw = std::make_unique<RawSocket>(endpoint);
    ASSERT_GE(raw->fd(), 0);
    ASSERT_TRUE(raw->authenticate(kToken)) << "stalled peer " << i;
    std::string frame;
    if (i % 2 == 0) {
      frame = header_of(FrameKind::kEvent, 0, kDeclared);
    } else {
      frame = header_of(FrameKind::kEvent, 0, 1, 1);
      put_le<uint64_t>(frame, kDeclared);
      frame += '\xc0';  // the body: nil
    }
    ASSERT_TRUE(raw->write(frame + std::string(1000, 'x')));
    stalled.push_back(std::move(raw));
  }

  // 5,000 silent connections; the good peer is served all along.
  std::vector<int> silent;
  for (int i = 0; i < kSilent; ++i) {
    int fd = connect_nonblocking(endpoint);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    silent.push_back(fd);
    if (i % 500 == 499) {
      ASSERT_TRUE(good.echo(i)) << "during the flood, after " << i + 1;
    }
  }
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(good.echo(kSilent + i)) << "after the flood";
  auto flood_time = Clock::now() - attack_start;

  // Every stalled frame is closed once it has made no progress for the stall deadline.
  auto closed_by = Clock::now() + std::chrono::milliseconds(2 * kStallMs) + kDeadline;
  int still_open = 0;
  for (auto& raw : stalled) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(closed_by - Clock::now());
    if (!raw->read_until_closed(std::max(left, 0ms))) ++still_open;
  }
  EXPECT_EQ(still_open, 0) << "stalled frames the server did not close";
  long peak = status_kib(server.pid(), "VmHWM");
  long rss_after = status_kib(server.pid(), "VmRSS");

  // When the silent peers go away, their pending handshakes end and new clients get in.
  for (int fd : silent) ::close(fd);
  bool fresh_ok = eventually(
      [&] {
        Client fresh(endpoint);
        return fresh.connect() && fresh.echo(-1);
      },
      20s);
  EXPECT_TRUE(fresh_ok) << "no new client was served after the flood";
  EXPECT_TRUE(good.echo(-2));
  EXPECT_TRUE(server.stop()) << "the server did not exit cleanly";

  std::ifstream in(log_path);
  std::string line, sample;
  size_t lines = 0;
  while (std::getline(in, line)) {
    if (lines < 4) sample += line + "\n";
    ++lines;
  }
  std::cout << "flood: " << kSilent << " silent + " << kStalled << " stalled peers in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(flood_time).count()
            << " ms; server RSS before " << rss_before << " KiB, peak " << peak << " KiB (growth "
            << peak - rss_before << " KiB, bound " << kRssBoundKiB << "), after " << rss_after
            << " KiB; " << lines << " log lines\n"
            << sample;
  EXPECT_LT(peak - rss_before, kRssBoundKiB);
  EXPECT_LE(lines, kMaxLogLines);
}

TEST(TransportFlood, OutOfDescriptorsTheListenerBacksOffAndLogsRarely) {
  // The server may open 64 files: 200 silent connections run it out of descriptors, so accept
  // fails with EMFILE until some go away. It must neither spin nor log each failure (LST-2/3).
  constexpr int kConnections = 200;
#ifdef __SANITIZE_ADDRESS__
  // UBSan (part of that build) checks the type of an object it has not met before by reading
  // it through a pipe; out of descriptors that fails and reads as a bad object, which aborts
  // the server. The release and TSan builds run this test.
  GTEST_SKIP() << "UBSan's vptr check needs free descriptors, which this test takes away";
#endif
  ASSERT_TRUE(raise_file_limit(kConnections + 100));
  TempDir dir;
  std::string log_path = dir.path() + "/server.log";
  FloodServer server(log_path, 64);
  ASSERT_GT(server.pid(), 0);
  std::string endpoint = server.endpoint();
  ASSERT_FALSE(endpoint.empty()) << "the flood server did not start";
  Client good(endpoint);
  ASSERT_TRUE(good.connect());
  ASSERT_TRUE(good.echo(-1));

  std::vector<int> silent;
  for (int i = 0; i < kConnections; ++i) {
    int fd = connect_nonblocking(endpoint);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    silent.push_back(fd);
  }
  ASSERT_TRUE(eventually(
      [&] { return read_file(log_path).find("Too many open files") != std::string::npos; }, 10s))
      << "accept never ran out of descriptors:\n"
      << read_file(log_path);
  // For a second of failing accepts, the good peer is served all along.
  auto until = Clock::now() + 1s;
  int calls = 0;
  while (Clock::now() < until) ASSERT_TRUE(good.echo(calls++));
  size_t lines = count_lines(read_file(log_path));

  for (int fd : silent) ::close(fd);
  EXPECT_TRUE(eventually(
      [&] {
        Client fresh(endpoint);
        return fresh.connect() && fresh.echo(-1);
      },
      20s))
      << "no new client was served once descriptors were free again; the server's log:\n"
      << read_file(log_path).substr(0, 6000);
  EXPECT_TRUE(server.stop());
  std::cout << "out of descriptors: " << calls << " good calls in 1 s, " << lines
            << " log lines meanwhile\n";
  EXPECT_LE(lines, 30u) << read_file(log_path).substr(0, 4000);
}

}  // namespace
}  // namespace troupe::transport::testing
