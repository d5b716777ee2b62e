// The honest paths of the transport (large attachments, pipelining, pending calls failing when
// the server closes), the client's check of the server's proof against fake servers, and the
// token helpers. Hostile clients are in transport_test.cc.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "transport/transport_test_util.h"

namespace troupe::transport::testing {
namespace {

class LiveClient : public LiveServerTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string transport() const override { return GetParam(); }

  // The server side of the newest connection.
  std::shared_ptr<RpcPeer> newest_server_peer() {
    std::lock_guard<std::mutex> lock(mu_);
    return server_peers_.back();
  }
  bool wait_held(size_t n) {
    auto deadline = Clock::now() + kDeadline;
    while (Clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (held_.size() >= n) return true;
      }
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
};

TEST_P(LiveClient, TenMegabyteAttachmentRoundTripsByteExact) {
  std::vector<uint8_t> data(10u << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  Bytes blob(std::move(data));
  auto f = bystander_->call("echo", Map{{"blob", blob}, {"tag", "big"}});
  ASSERT_TRUE(f.wait_for(kDeadline));
  ASSERT_FALSE(f.error()) << f.error()->what();
  Value v = f.get();
  const Value* got = v.find("blob");
  ASSERT_NE(got, nullptr);
  ASSERT_TRUE(got->is_bytes());
  EXPECT_EQ(got->as_bytes().size(), blob.size());
  EXPECT_TRUE(got->as_bytes() == blob);
  EXPECT_NE(got->as_bytes().data(), blob.data());  // it really crossed the socket
  EXPECT_EQ(*v.find("tag"), Value("big"));
}

TEST_P(LiveClient, ThousandPipelinedCallsCompleteInOrder) {
  constexpr int kCalls = 1000;
  struct Order {  // shared with the callbacks, which may outlive a failed test body
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> seen;
  };
  auto order = std::make_shared<Order>();
  std::vector<Future<Value>> futures;
  for (int i = 0; i < kCalls; ++i) {  // all sent before any reply is awaited
    futures.push_back(bystander_->call("echo", Map{{"i", i}}));
    futures.back().then([order, i](const Future<Value>&) {
      std::lock_guard<std::mutex> lock(order->mu);
      order->seen.push_back(i);
      order->cv.notify_all();
    });
  }
  ASSERT_TRUE(wait_all(futures, kDeadline));
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_FALSE(futures[i].error()) << futures[i].error()->what();
    EXPECT_EQ(futures[i].get(), Value(Map{{"i", i}}));
  }
  std::unique_lock<std::mutex> lock(order->mu);
  // A callback runs just after its future is ready, so the last one may still be on its way.
  ASSERT_TRUE(order->cv.wait_for(lock, kDeadline, [&] { return order->seen.size() == kCalls; }));
  for (int i = 0; i < kCalls; ++i) ASSERT_EQ(order->seen[i], i) << "completion " << i;
  EXPECT_EQ(requests_, kCalls);
  EXPECT_EQ(bystander_->pending_calls(), 0u);
}

TEST_P(LiveClient, ServerCloseFailsPendingCallsWithConnectionLost) {
  auto client = connect_ok();
  ASSERT_NE(client, nullptr);
  std::vector<Future<Value>> pending;
  for (int i = 0; i < 3; ++i)
    pending.push_back(client->call("hold", {}, "hold " + std::to_string(i)));
  ASSERT_TRUE(wait_held(3));
  EXPECT_EQ(client->pending_calls(), 3u);
  newest_server_peer()->close(Error(ErrorCode::kShutdown, "server going away"));
  ASSERT_TRUE(wait_all(pending, kDeadline));
  for (const auto& f : pending) {
    ASSERT_TRUE(f.error().has_value());
    EXPECT_EQ(f.error()->code(), ErrorCode::kConnectionLost) << f.error()->what();
    EXPECT_NE(f.error()->message().find(endpoint_), std::string::npos) << f.error()->what();
  }
  EXPECT_EQ(client->pending_calls(), 0u);
  auto late = client->call("echo", {});  // fails at once, never hangs
  ASSERT_TRUE(late.ready());
  EXPECT_EQ(late.error()->code(), ErrorCode::kConnectionLost);
  EXPECT_TRUE(echo(*bystander_));
}

TEST_P(LiveClient, FailureHookChangesThePendingCallsError) {
  auto client = connect_ok();
  ASSERT_NE(client, nullptr);
  client->set_failure_hook([](const Error& reason) {
    return Error(ErrorCode::kWorkerDied, "worker 'w-3' (pid 42) died; " + reason.message());
  });
  auto held = client->call("hold", {});
  ASSERT_TRUE(wait_held(1));
  newest_server_peer()->close(Error(ErrorCode::kShutdown, "killed"));
  ASSERT_TRUE(held.wait_for(kDeadline));
  ASSERT_TRUE(held.error().has_value());
  EXPECT_EQ(held.error()->code(), ErrorCode::kWorkerDied);
  EXPECT_NE(held.error()->message().find("worker 'w-3' (pid 42) died; "), std::string::npos);
  EXPECT_NE(held.error()->message().find("connection closed by"), std::string::npos);
  auto late = client->call("echo", {});
  ASSERT_TRUE(late.ready());
  EXPECT_EQ(late.error()->code(), ErrorCode::kWorkerDied);
}

TEST_P(LiveClient, CallsRacingAServerCloseAllComplete) {
  auto client = connect_ok();
  ASSERT_NE(client, nullptr);
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<Future<Value>> all;
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    callers.emplace_back([&, t] {
      std::vector<Future<Value>> mine;
      while (!stop && mine.size() < 20000) mine.push_back(client->call("echo", Map{{"t", t}}));
      std::lock_guard<std::mutex> lock(mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  auto deadline = Clock::now() + kDeadline;
  while (requests_ < 50 && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_GE(requests_, 50);  // calls are being served when the server closes
  newest_server_peer()->close(Error(ErrorCode::kShutdown, "closing under load"));
  while (!client->closed() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(client->closed());
  std::this_thread::sleep_for(5ms);  // some calls after the close, too
  stop = true;
  for (auto& t : callers) t.join();
  ASSERT_TRUE(wait_all(all, kDeadline)) << "a call hangs";
  size_t ok = 0;
  for (const auto& f : all) {
    if (!f.error()) {
      ++ok;
      continue;
    }
    EXPECT_EQ(f.error()->code(), ErrorCode::kConnectionLost) << f.error()->what();
  }
  // No `ok > 0`: a server that closes with requests unread resets the connection, and the
  // client's kernel may then drop the replies it had not read yet (seen on Unix sockets).
  EXPECT_LT(ok, all.size());
  EXPECT_EQ(client->pending_calls(), 0u);
  EXPECT_TRUE(echo(*bystander_));
}

INSTANTIATE_TEST_SUITE_P(Transport, LiveClient, ::testing::Values("unix", "tcp", "tls"),
                         transport_name);

// ---- the client checks the server: fake servers written with raw sockets ----

enum class Fake {
  kWrongTokenProof,
  kReflectedProof,
  kEmptyProof,
  kNoChallenge,
  kHugeFrame,
  kClosesAfterAuth,
  kSilent
};

struct FakeCase {
  Fake fake;
  const char* name;
  ErrorCode code;
  const char* message;
};

void PrintTo(const FakeCase& c, std::ostream* os) { *os << c.name; }

class FakeServer : public ::testing::TestWithParam<FakeCase> {};

TEST_P(FakeServer, ClientRefusesAServerWithoutTheToken) {
  const FakeCase& c = GetParam();
  TempDir dir;
  std::string path = dir.path() + "/fake.sock";
  int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(lfd, 1), 0);

  std::atomic<bool> client_closed{false};
  std::thread server([&] {
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return ADD_FAILURE() << "the client never connected";
    RawSocket s(::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC));
    std::string sn = token::random_bytes(32);
    if (c.fake == Fake::kNoChallenge) {
      s.write(frame_bytes(FrameKind::kRequest, 1, request_body("echo", {})));
    } else if (c.fake == Fake::kHugeFrame) {
      s.write(header_of(FrameKind::kChallenge, 0, 1u << 30));
    } else if (c.fake != Fake::kSilent) {
      s.write(frame_bytes(FrameKind::kChallenge, 0, sn));
      auto auth = s.read_frame();
      if (!auth || auth->kind != FrameKind::kAuth || auth->body.size() != 64)
        return ADD_FAILURE() << "no auth frame from the client";
      std::string cn = auth->body.substr(0, 32);
      // The client proves the token as handshake.h says.
      EXPECT_EQ(auth->body.substr(32), token::hmac_sha256(kToken, "troupe-client" + sn + cn));
      std::string proof;
      if (c.fake == Fake::kWrongTokenProof)
        proof = token::hmac_sha256("not the token", "troupe-server" + sn + cn);
      else if (c.fake == Fake::kReflectedProof)
        proof = auth->body.substr(32);  // the client's own proof sent back
      if (c.fake == Fake::kClosesAfterAuth) return;
      s.write(frame_bytes(FrameKind::kAuthOk, 0, proof));
    }
    client_closed = s.read_until_closed().has_value();
  });

  IoLoop loop;
  auto done = std::make_shared<std::promise<std::optional<Error>>>();
  auto timeout = c.fake == Fake::kSilent ? 300ms : std::chrono::milliseconds(kDeadline);
  async_connect(loop.context(), "unix:" + path, kToken, timeout,
                [done](std::shared_ptr<Connection> conn, const Error* e) {
                  if (!e) conn->close(Error(ErrorCode::kShutdown, "unexpected success"));
                  done->set_value(e ? std::optional<Error>(*e) : std::nullopt);
                });
  auto result = done->get_future();
  ASSERT_EQ(result.wait_for(kDeadline + 1s), std::future_status::ready);
  std::optional<Error> error = result.get();
  server.join();
  loop.run_sync([] {});
  loop.stop();
  ::close(lfd);
  ASSERT_TRUE(error.has_value()) << "the client accepted a server that does not know the token";
  EXPECT_EQ(error->code(), c.code) << error->what();
  EXPECT_NE(error->message().find(c.message), std::string::npos) << error->what();
  if (c.fake != Fake::kClosesAfterAuth) {
    EXPECT_TRUE(client_closed) << "the client kept the connection open";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Client, FakeServer,
    ::testing::Values(FakeCase{Fake::kWrongTokenProof, "WrongTokenProof",
                               ErrorCode::kUnauthenticated, "could not prove the cluster token"},
                      FakeCase{Fake::kReflectedProof, "ReflectedClientProof",
                               ErrorCode::kUnauthenticated, "could not prove the cluster token"},
                      FakeCase{Fake::kEmptyProof, "EmptyProof", ErrorCode::kUnauthenticated,
                               "could not prove the cluster token"},
                      FakeCase{Fake::kNoChallenge, "NoChallenge", ErrorCode::kProtocol,
                               "did not start the troupe handshake"},
                      FakeCase{Fake::kHugeFrame, "OneGiBChallenge", ErrorCode::kConnectionLost,
                               "frame body of 1073741824 bytes exceeds the limit of 512"},
                      FakeCase{Fake::kClosesAfterAuth, "ClosesAfterAuth",
                               ErrorCode::kConnectionLost,
                               "connection closed during authentication"},
                      FakeCase{Fake::kSilent, "Silent", ErrorCode::kTimeout, "timed out"}),
    [](const ::testing::TestParamInfo<FakeCase>& info) { return info.param.name; });

// ---- a Connection alone, over a socketpair ----

// A Connection on `loop` over one end of a socketpair, and the other end (null on failure).
std::pair<std::shared_ptr<Connection>, RawSocket> connection_pair(IoLoop& loop) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return {nullptr, RawSocket(-1)};
  Socket sock(loop.context());
  sock.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), sv[0]);
  return {std::make_shared<Connection>(std::move(sock), "pair"), RawSocket(sv[1])};
}

TEST(ConnectionLimits, AttachmentTableLargerThanTheReadBuffer) {
  IoLoop loop;
  auto [conn, raw] = connection_pair(loop);
  ASSERT_TRUE(conn);
  wire::FrameLimits limits;
  limits.max_attachments = 10000;  // a 72 KB table: more than the 64 KB read buffer
  auto got = std::make_shared<std::promise<size_t>>();
  conn->set_handlers(
      limits, [got](wire::Frame&& f) { got->set_value(f.attachments.size()); },
      [](const Error&) {});
  conn->start();
  ASSERT_TRUE(raw.write(header_of(FrameKind::kEvent, 0, 0, 9000) + std::string(8 * 9000, '\0')));
  auto f = got->get_future();
  EXPECT_EQ(f.wait_for(2s), std::future_status::ready);
  conn->close(Error(ErrorCode::kShutdown, "done"));
  loop.run_sync([] {});
  loop.stop();
}

// IO-1: a close posted by the last handler the loop's thread runs (after stop() was called)
// still runs: the connection's close handler is called and the peer it held is released.
TEST(IoLoopStop, RunsTheCloseTheLastHandlerPosted) {
  IoLoop loop;
  auto [conn, raw] = connection_pair(loop);
  ASSERT_TRUE(conn);
  std::atomic<bool> closed{false};
  RpcPeer::Handlers handlers;
  handlers.on_close = [&closed](const Error&) { closed = true; };
  std::weak_ptr<RpcPeer> peer = RpcPeer::attach(conn, wire::FrameLimits{}, std::move(handlers));
  conn->start();
  std::promise<void> enter, release;
  auto released = release.get_future();
  asio::post(loop.context(), [&enter, &released, conn] {
    enter.set_value();
    released.wait();
    conn->close(Error(ErrorCode::kShutdown, "posted after the stop"));
  });
  // The loop's thread is inside that handler before stop() is called (a stop() that came first
  // would run the handler itself, in its drain).
  enter.get_future().wait();
  std::thread stopper([&loop] { loop.stop(); });
  // The loop is stopped (its thread still inside the handler above) before the close is posted.
  auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (!loop.context().stopped() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_TRUE(loop.context().stopped());
  release.set_value();
  stopper.join();
  EXPECT_TRUE(closed);
  EXPECT_TRUE(conn->closed());
  conn.reset();
  EXPECT_TRUE(peer.expired()) << "the connection and its peer still hold each other";
}

// ---- token helpers ----

std::string hex(const std::string& s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

TEST(Token, HmacSha256MatchesRfc4231) {
  // Test case 2.
  EXPECT_EQ(hex(token::hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 1.
  EXPECT_EQ(hex(token::hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(Token, ConstantTimeEqual) {
  EXPECT_TRUE(token::constant_time_equal("", ""));
  EXPECT_TRUE(token::constant_time_equal("abc", "abc"));
  EXPECT_TRUE(token::constant_time_equal(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(token::constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
  EXPECT_FALSE(token::constant_time_equal("abc", "abd"));
  EXPECT_FALSE(token::constant_time_equal("abc", "xbc"));
  EXPECT_FALSE(token::constant_time_equal("abc", "ab"));
  EXPECT_FALSE(token::constant_time_equal("", "a"));
  std::string mac = token::hmac_sha256(kToken, "m");
  std::string other = mac;
  other[31] ^= 1;
  EXPECT_FALSE(token::constant_time_equal(mac, other));
}

TEST(Token, GenerateAndRandomBytes) {
  std::string a = token::generate(), b = token::generate();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
  EXPECT_EQ(token::random_bytes(32).size(), 32u);
  EXPECT_NE(token::random_bytes(32), token::random_bytes(32));
}

TEST(Token, WriteFileCreatesMode0600) {
  TempDir dir;
  std::string path = dir.path() + "/token";
  mode_t old = ::umask(0);  // even with a permissive umask
  token::write_file(path, "secret-token");
  ::umask(old);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(token::read_file(path), "secret-token");
  try {  // never overwrites an existing file
    token::write_file(path, "other");
    ADD_FAILURE() << "write_file replaced an existing token file";
  } catch (const Error&) {
  }
  EXPECT_EQ(token::read_file(path), "secret-token");
}

TEST(Token, ReadFileRefusesFilesOthersCanRead) {
  TempDir dir;
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    SCOPED_TRACE(mode);
    std::string path = dir.path() + "/t" + std::to_string(mode);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "tok\n", 4), 4);
    ASSERT_EQ(::fchmod(fd, mode), 0);
    ::close(fd);
    try {
      token::read_file(path);
      ADD_FAILURE() << "read a token file with mode " << std::oct << mode;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnauthenticated);
      EXPECT_NE(e.message().find("chmod 600"), std::string::npos) << e.message();
    }
    ASSERT_EQ(::chmod(path.c_str(), 0400), 0);  // owner-only is fine
    EXPECT_EQ(token::read_file(path), "tok");
  }
}

}  // namespace
}  // namespace troupe::transport::testing
