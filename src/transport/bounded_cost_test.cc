// What a peer can make a process spend: buffers allocated as bytes arrive (CONN-1), the frame
// stall deadline (CONN-2), the cap on pending handshakes (LST-1) and rate-limited log lines
// (LST-3). The flood against a whole server process is tests/integration/transport_flood_test.
#include <fstream>

#include "test_util.h"
#include "transport/log_limiter.h"
#include "transport/transport_test_util.h"

namespace troupe::transport::testing {
namespace {

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

// A Connection over a socketpair; the test writes the other end through `raw`.
class PairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    raw_ = std::make_unique<RawSocket>(sv[1]);
    Socket sock(loop_.context());
    sock.assign(asio::generic::stream_protocol(AF_UNIX, SOCK_STREAM), sv[0]);
    conn_ = std::make_shared<Connection>(std::move(sock), "pair");
  }
  void TearDown() override {
    conn_->close(Error(ErrorCode::kShutdown, "test over"));
    loop_.run_sync([] {});
    loop_.stop();
  }
  static wire::FrameLimits big_limits() {
    wire::FrameLimits l;
    l.max_body = 64u << 20;
    l.max_attachment = 1ull << 30;
    l.max_total = 4ull << 30;
    return l;
  }

  StderrTee log_;
  IoLoop loop_;
  std::unique_ptr<RawSocket> raw_;
  std::shared_ptr<Connection> conn_;
};

TEST_F(PairTest, LargeFramesArriveByteExactInPiecesOfAnySize) {
  // Parts on both sides of every threshold: empty, tiny, around the 16 KiB direct-read size and
  // the 64 KiB first chunk, and several MiB (grown in steps).
  std::vector<size_t> sizes = {0, 1, 16383, 16384, 65535, 65537, 3u << 20, 7u << 20};
  std::string body((5u << 20) + 3, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 7 + 1);
  std::vector<std::string> atts;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::string a(sizes[k], '\0');
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>(i * 13 + k);
    atts.push_back(std::move(a));
  }
  auto frames = std::make_shared<std::promise<std::vector<wire::Frame>>>();
  auto got = std::make_shared<std::vector<wire::Frame>>();
  conn_->set_handlers(
      big_limits(),
      [frames, got](wire::Frame&& f) {
        got->push_back(std::move(f));
        if (got->size() == 3) frames->set_value(std::move(*got));
      },
      [](const Error&) {});
  conn_->start();
  // Three frames back to back (the small one in the middle shares reads with its neighbours),
  // written in pieces of odd sizes.
  std::string bytes = frame_bytes(FrameKind::kEvent, 1, body, atts) +
                      frame_bytes(FrameKind::kEvent, 2, "small", {"x"}) +
                      frame_bytes(FrameKind::kEvent, 3, "", atts);
  std::thread writer([&] {
    size_t step = 1;
    for (size_t pos = 0; pos < bytes.size();) {
      size_t n = std::min(step, bytes.size() - pos);
      if (!raw_->write(std::string_view(bytes).substr(pos, n))) return;
      pos += n;
      step = step * 3 % 200003 + 1;
    }
  });
  auto f = frames->get_future();
  bool ready = f.wait_for(20s) == std::future_status::ready;
  writer.join();
  ASSERT_TRUE(ready) << "the frames did not arrive";
  auto got_frames = f.get();
  EXPECT_EQ(got_frames[0].request_id, 1u);
  EXPECT_TRUE(got_frames[0].body == body);
  EXPECT_EQ(got_frames[1].body, "small");
  ASSERT_EQ(got_frames[1].attachments.size(), 1u);
  EXPECT_EQ(got_frames[1].attachments[0].view(), "x");
  EXPECT_EQ(got_frames[2].body, "");
  for (size_t k : {size_t{0}, size_t{2}}) {
    ASSERT_EQ(got_frames[k].attachments.size(), sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i)
      EXPECT_TRUE(got_frames[k].attachments[i].view() == atts[i]) << "frame " << k << " att " << i;
  }
}

TEST_F(PairTest, DeclaredSizesAreNotAllocatedBeforeTheirBytesArrive) {
  // A 64 MiB body and four 512 MiB attachments are declared; 1000 bytes come, then nothing.
  // While the frame is held (the close handler runs before its buffers go), RSS must not have
  // grown by anything like the declared 2 GiB; the stall deadline closes the connection.
  conn_->set_stall_timeout(300ms);
  auto closed = std::make_shared<std::promise<std::pair<std::string, long>>>();
  conn_->set_handlers(
      big_limits(), [](wire::Frame&&) { ADD_FAILURE() << "a frame was delivered"; },
      [closed](const Error& e) {
        closed->set_value({e.what(), rss_kib()});
      });
  long before = rss_kib();
  auto start = Clock::now();
  conn_->start();
  std::string frame = header_of(FrameKind::kEvent, 0, 64u << 20, 4);
  for (int i = 0; i < 4; ++i) put_le<uint64_t>(frame, 512u << 20);
  ASSERT_TRUE(raw_->write(frame + std::string(1000, 'x')));
  auto f = closed->get_future();
  ASSERT_EQ(f.wait_for(kDeadline), std::future_status::ready) << "the stalled frame stayed open";
  auto [reason, during] = f.get();
  EXPECT_GE(Clock::now() - start, 250ms);
  EXPECT_HAS(reason, "frame stalled: no bytes for 300 ms after 1000 of 2214592512 payload bytes");
  EXPECT_TRUE(log_.wait_for("closing connection from pair: frame stalled"));
  EXPECT_LT(during - before, 8 * 1024) << "KiB of RSS grew while the frame was held";
}

TEST_F(PairTest, HeaderCutShortIsClosedAtTheStallDeadline) {
  conn_->set_stall_timeout(200ms);
  auto closed = std::make_shared<std::promise<std::string>>();
  conn_->set_handlers(
      big_limits(), [](wire::Frame&&) {},
      [closed](const Error& e) { closed->set_value(e.what()); });
  conn_->start();
  ASSERT_TRUE(raw_->write(header_of(FrameKind::kEvent, 0, 10).substr(0, 10)));
  auto f = closed->get_future();
  ASSERT_EQ(f.wait_for(kDeadline), std::future_status::ready);
  EXPECT_HAS(f.get(), "after 10 bytes of a frame header");
}

TEST_F(PairTest, IdleConnectionsAndSlowWholeFramesAreNotStalls) {
  // The deadline is on progress inside a frame: an idle connection is not watched at all, and a
  // frame whose bytes keep coming passes each check of the deadline, however long it takes in
  // all. (Gaps of a tenth of the deadline, so that a loaded machine does not make them stalls.)
  conn_->set_stall_timeout(500ms);
  auto delivered = std::make_shared<std::promise<std::string>>();
  auto closed = std::make_shared<std::atomic<bool>>(false);
  conn_->set_handlers(
      big_limits(), [delivered](wire::Frame&& f) { delivered->set_value(f.body); },
      [closed](const Error&) { *closed = true; });
  conn_->start();
  auto watching = [&] {
    bool w = true;
    loop_.run_sync([&] { w = conn_->watching_for_stall(); });
    return w;
  };
  EXPECT_FALSE(watching()) << "an idle connection has a stall deadline";
  std::string frame = frame_bytes(FrameKind::kEvent, 0, std::string(200, 'b'));
  // 2-byte pieces 50 ms apart until the deadline has come due twice and found progress (about
  // 1 s), then the rest.
  size_t pos = 0;
  for (; pos < frame.size() && conn_->stall_checks_passed() < 2; pos += 2) {
    ASSERT_TRUE(raw_->write(frame.substr(pos, 2))) << "closed after " << pos << " bytes";
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_GE(conn_->stall_checks_passed(), 2u) << "the deadline never came due inside the frame";
  ASSERT_TRUE(raw_->write(frame.substr(pos)));
  auto f = delivered->get_future();
  ASSERT_EQ(f.wait_for(kDeadline), std::future_status::ready);
  EXPECT_EQ(f.get(), std::string(200, 'b'));
  // The deadline armed inside the frame comes due once more and, the connection idle, stops.
  EXPECT_TRUE(eventually([&] { return !watching(); }, kDeadline));
  EXPECT_FALSE(*closed);
}

// ---- a listener with a cap of 4 pending handshakes (LST-4) ----

// A listener on `endpoint` with a cap of 4 pending handshakes; counts authenticated peers.
class CappedListener {
 public:
  explicit CappedListener(const std::string& endpoint) {
    ListenerOptions options;
    options.max_pending_handshakes = 4;
    listener_ = Listener::start(
        loop_.context(), endpoint, kToken,
        [this](std::shared_ptr<Connection> c) {
          ++authenticated;
          peers_.push_back(RpcPeer::attach(c, wire::FrameLimits{}, {}));
        },
        options);
  }
  ~CappedListener() {
    loop_.run_sync([&] {
      listener_->close();
      for (auto& p : peers_) p->close(Error(ErrorCode::kShutdown, "test over"));
    });
    loop_.run_sync([] {});
    loop_.stop();
  }
  std::string endpoint() const { return listener_->endpoint(); }
  uint64_t evicted() const { return listener_->evicted_handshakes(); }
  std::atomic<int> authenticated{0};

 private:
  IoLoop loop_;
  std::shared_ptr<Listener> listener_;
  std::vector<std::shared_ptr<RpcPeer>> peers_;  // I/O thread only
};

// Opens `n` connections from `source` that each wait in the handshake (challenge read).
void open_silent(const std::string& ep, const std::string& source, int n,
                 std::vector<std::unique_ptr<RawSocket>>* out) {
  for (int i = 0; i < n; ++i) {
    out->push_back(std::make_unique<RawSocket>(ep, source));
    ASSERT_TRUE(out->back()->await_challenge()) << "connection " << i << " from " << source;
  }
}

TEST(ListenerCap, AtTheCapANewConnectionEvictsTheOldestPendingHandshake) {
  StderrTee log;
  TempDir dir;
  CappedListener server("unix:" + dir.path() + "/cap.sock");
  std::string ep = server.endpoint();
  // 4 fill the cap; each of the next 40 is admitted (it gets its challenge) and evicts the
  // oldest: the first 4, then the first 36 of the 40.
  std::vector<std::unique_ptr<RawSocket>> raws;
  open_silent(ep, "", 44, &raws);
  EXPECT_EQ(server.evicted(), 40u);
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(raws[i]->read_until_closed().has_value()) << "connection " << i << " stayed open";
  for (int i = 40; i < 44; ++i) EXPECT_TRUE(raws[i]->authenticate(kToken)) << "connection " << i;
  EXPECT_TRUE(eventually([&] { return server.authenticated == 4; }, kDeadline));

  ASSERT_TRUE(log.wait_for("closing connection from " + ep +
                           ": evicted from the handshake by a new connection from " + ep +
                           ": 4 connections were in the handshake (the limit), 4 of them from "
                           "unix (1 evicted so far)"));
  size_t lines = count(log.text(), "evicted from the handshake");
  EXPECT_LE(lines, 20u) << "the lines are not rate-limited";
}

TEST(ListenerCap, AFloodFromOneAddressEvictsOnlyItsOwnHandshakes) {
  CappedListener server("tcp:127.0.0.1:0");
  std::string ep = server.endpoint();
  std::vector<std::unique_ptr<RawSocket>> flood;
  open_silent(ep, "127.0.0.6", 4, &flood);  // the cap is full
  RawSocket client(ep, "127.0.0.5");
  ASSERT_TRUE(client.await_challenge()) << "a client from another address was refused";
  EXPECT_EQ(server.evicted(), 1u);
  // 20 more from the flooding address: 127.0.0.6 holds the most, so they evict its own (the
  // client's handshake, the oldest now, stays).
  open_silent(ep, "127.0.0.6", 20, &flood);
  EXPECT_EQ(server.evicted(), 21u);
  EXPECT_TRUE(client.authenticate(kToken));
  for (int i = 0; i < 21; ++i)
    ASSERT_TRUE(flood[i]->read_until_closed().has_value()) << "flood connection " << i;
  for (int i = 21; i < 24; ++i) EXPECT_TRUE(flood[i]->authenticate(kToken)) << "flood " << i;
  EXPECT_TRUE(eventually([&] { return server.authenticated == 4; }, kDeadline));
}

TEST(ListenerCap, AClientFromTheFloodingAddressOutlivesCapMinusOneNewerConnections) {
  CappedListener server("tcp:127.0.0.1:0");
  std::string ep = server.endpoint();
  std::vector<std::unique_ptr<RawSocket>> flood;
  open_silent(ep, "127.0.0.6", 10, &flood);
  EXPECT_EQ(server.evicted(), 6u);
  // Same address: the oldest of that address goes first, so the client has 3 newer arrivals to
  // answer in; it needs one round trip.
  RawSocket client(ep, "127.0.0.6");
  ASSERT_TRUE(client.await_challenge());
  open_silent(ep, "127.0.0.6", 3, &flood);
  EXPECT_TRUE(client.authenticate(kToken));
  // A client that waits through 4 newer arrivals is evicted.
  RawSocket slow(ep, "127.0.0.6");
  ASSERT_TRUE(slow.await_challenge());
  open_silent(ep, "127.0.0.6", 4, &flood);
  ASSERT_TRUE(slow.read_until_closed().has_value());
  EXPECT_FALSE(slow.authenticate(kToken));
  EXPECT_EQ(server.evicted(), 6u + 1 + 3 + 4);  // the client's handshake had ended: room for slow
  EXPECT_TRUE(eventually([&] { return server.authenticated == 1; }, kDeadline));
}

TEST(ListenerCap, FailedHandshakesAreLoggedAtARateLimit) {
  StderrTee log;
  TempDir dir;
  IoLoop loop;
  auto listener = Listener::start(loop.context(), "unix:" + dir.path() + "/log.sock", kToken,
                                  [](std::shared_ptr<Connection>) {});
  std::string ep = listener->endpoint();
  for (int i = 0; i < 60; ++i) {
    RawSocket raw(ep);
    ASSERT_TRUE(raw.write(std::string(64, '\xa5')));  // garbage: bad frame magic
    ASSERT_TRUE(raw.read_until_closed().has_value());
  }
  ASSERT_TRUE(log.wait_for(": bad frame magic"));
  EXPECT_LE(count(log.text(), ": bad frame magic"), 20u);
  loop.run_sync([&] { listener->close(); });
  loop.run_sync([] {});
  loop.stop();
}

TEST(LogLimiter, BurstThenSuppressedCountedAndReported) {
  LogLimiter limiter(3, 1s);
  const auto t0 = LogLimiter::Clock::now();
  size_t suppressed = 99;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(limiter.allow(&suppressed, t0 + i * 100ms));
    EXPECT_EQ(suppressed, 0u);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.allow(&suppressed, t0 + 900ms));
  ASSERT_TRUE(limiter.allow(&suppressed, t0 + 1100ms));  // a new window
  EXPECT_EQ(suppressed, 5u);
}

}  // namespace
}  // namespace troupe::transport::testing
