// TLS on TCP (transport/tls.h, CONN-3): the certificates a cluster makes, the peers a TLS
// listener refuses (plaintext, another CA, no certificate), a TLS client against a plaintext
// server, and the bytes on the wire (captured by a relay between client and server). The honest
// paths run in transport_client_test.cc's LiveClient suite under the "tls" transport.
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <asio/ip/tcp.hpp>
#include <asio/ssl/context.hpp>
#include <fstream>
#include <sstream>

#include "transport/transport_test_util.h"

namespace troupe::transport::testing {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether the certificate in `cert_path` is signed by the CA in `ca_path`.
bool signed_by(const std::string& cert_path, const std::string& ca_path) {
  FILE* f = std::fopen(cert_path.c_str(), "r");
  if (!f) return false;
  X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  f = std::fopen(ca_path.c_str(), "r");
  if (!f) return X509_free(cert), false;
  X509* ca = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  bool ok = false;
  if (cert && ca) {
    X509_STORE* store = X509_STORE_new();
    X509_STORE_add_cert(store, ca);
    X509_STORE_CTX* ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, store, cert, nullptr);
    ok = X509_verify_cert(ctx) == 1;
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
  }
  X509_free(cert);
  X509_free(ca);
  return ok;
}

TEST(TlsCertificates, AHostCertificateIsMadeOnceSignedByTheClusterCa) {
  TempDir dir;
  std::string tls = dir.path() + "/tls";
  make_cluster_ca(tls);
  struct stat st {};
  ASSERT_EQ(::stat(tls.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((tls + "/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string ca = read_all(tls + "/ca.pem");
  make_cluster_ca(tls);  // a CA that is there is kept
  EXPECT_EQ(read_all(tls + "/ca.pem"), ca);

  ensure_certificate(tls, "node-1");
  ASSERT_EQ(::stat((tls + "/node-1.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(signed_by(tls + "/node-1.pem", tls + "/ca.pem"));
  std::string cert = read_all(tls + "/node-1.pem");
  ensure_certificate(tls, "node-1");
  EXPECT_EQ(read_all(tls + "/node-1.pem"), cert);

  TempDir other;
  make_cluster_ca(other.path() + "/tls");
  EXPECT_FALSE(signed_by(tls + "/node-1.pem", other.path() + "/tls/ca.pem"));
}

TEST(TlsCertificates, BadNamesAndMissingFilesAreRefusedWithTheReason) {
  TempDir dir;
  std::string tls = dir.path() + "/tls";
  auto refusal = [&](const std::string& name) -> std::string {
    try {
      ensure_certificate(tls, name);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal("x").find("has no ca.pem"), std::string::npos) << refusal("x");
  make_cluster_ca(tls);
  for (const char* bad : {"", "ca", "../escape", "a/b", ".hidden"})
    EXPECT_NE(refusal(bad).find("bad certificate name"), std::string::npos) << bad;
  ASSERT_EQ(::unlink((tls + "/ca.key").c_str()), 0);
  EXPECT_NE(refusal("node-2").find("has no node-2.pem and no ca.key"), std::string::npos);
  // A directory without the process's certificate fails when it is configured, not later.
  try {
    configure_tls(TlsSettings{tls, "node-3"});
    ADD_FAILURE() << "configured without a certificate";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node-3.pem"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tls_context(), nullptr);
}

// A TLS listener (the "tls" transport of LiveServerTest) against peers that cannot speak its TLS.
class TlsListener : public LiveServerTest {
 protected:
  std::string transport() const override { return "tls"; }
  // A plaintext client waits for a challenge while the TLS server waits for its hello: the
  // server's handshake timeout ends it.
  std::chrono::milliseconds handshake_timeout() const override { return 500ms; }
  TlsSettings ours() const { return TlsSettings{dir_.path() + "/tls", "test"}; }

  // The server refused the newest connection: it logged why and authenticated nobody new.
  void expect_refused(const std::string& reason) {
    std::string line = "TLS handshake with tcp:127.0.0.1:";
    EXPECT_TRUE(log_.wait_for(line)) << "no log line with '" << line << "'";
    EXPECT_TRUE(log_.wait_for(reason)) << "no log line with '" << reason << "'";
    EXPECT_EQ(authenticated_.load(), 1);  // the bystander only
    EXPECT_EQ(requests_.load(), 0);
  }

  // Connects with `ctx` as the client's TLS context (the process's own stays as it is).
  Connected connect_with(std::shared_ptr<asio::ssl::context> ctx) {
    auto p = std::make_shared<std::promise<Connected>>();
    loop_.run_sync([&] {
      auto ep = parse_endpoint(endpoint_);
      auto socket = std::make_shared<Socket>(loop_.context(), ep.protocol());
      socket->async_connect(ep, [this, socket, ctx, p](const asio::error_code& ec) {
        if (ec) return p->set_value({nullptr, Error(ErrorCode::kConnectionLost, ec.message())});
        auto conn =
            std::make_shared<Connection>(std::move(*socket), endpoint_, ctx, TlsRole::kClient);
        client_handshake(conn, kToken, kDeadline,
                         [p](std::shared_ptr<Connection> c, const Error* e) {
                           if (e) return p->set_value({nullptr, *e});
                           c->close(Error(ErrorCode::kShutdown, "test over"));
                           p->set_value({nullptr, std::nullopt});
                         });
      });
    });
    auto f = p->get_future();
    if (f.wait_for(kDeadline + 1s) != std::future_status::ready)
      return {nullptr, Error(ErrorCode::kTimeout, "connect did not finish")};
    return f.get();
  }
};

TEST_F(TlsListener, APlaintextClientIsRefused) {
  configure_tls(std::nullopt);
  Connected c = connect(kToken);
  configure_tls(ours());
  ASSERT_TRUE(c.error) << "a plaintext client authenticated on a TLS listener";
  EXPECT_EQ(c.error->code(), ErrorCode::kConnectionLost) << c.error->what();
  EXPECT_NE(std::string(c.error->what()).find("uses TLS, set TROUPE_TLS_DIR"), std::string::npos)
      << c.error->what();
  EXPECT_TRUE(log_.wait_for("authentication timed out"));
  EXPECT_EQ(authenticated_.load(), 1);
  expect_still_serving();
}

TEST_F(TlsListener, RawPlaintextAuthBytesAreRefused) {
  RawSocket raw(endpoint_);
  ASSERT_GE(raw.fd(), 0);
  std::string cn(32, 'c');
  ASSERT_TRUE(raw.write(frame_bytes(FrameKind::kAuth, 0, cn + std::string(32, 'p'))));
  EXPECT_TRUE(raw.read_until_closed().has_value()) << "the server did not close it";
  expect_refused("failed: ");
  expect_still_serving();
}

TEST_F(TlsListener, AClientOfAnotherClusterCaIsRefused) {
  TempDir other;
  make_cluster_ca(other.path() + "/tls");
  configure_tls(TlsSettings{other.path() + "/tls", "intruder"});
  Connected c = connect(kToken);
  configure_tls(ours());
  ASSERT_TRUE(c.error) << "a client of another CA authenticated";
  // The client refuses the server's certificate too (it is not of the client's CA).
  EXPECT_EQ(c.error->code(), ErrorCode::kUnauthenticated) << c.error->what();
  EXPECT_NE(std::string(c.error->what()).find("TLS handshake with " + endpoint_ + " failed"),
            std::string::npos)
      << c.error->what();
  expect_refused("TLS handshake with");
  expect_still_serving();
}

TEST_F(TlsListener, AClientWithoutACertificateIsRefused) {
  // It trusts the cluster's CA but has no certificate of its own.
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls);
  ctx->load_verify_file(dir_.path() + "/tls/ca.pem");
  ctx->set_verify_mode(asio::ssl::verify_peer);
  Connected c = connect_with(ctx);
  ASSERT_TRUE(c.error) << "a client without a certificate authenticated";
  expect_refused("peer did not return a certificate");
  expect_still_serving();
}

TEST(TlsClient, ATlsClientOfAPlaintextServerFailsNamingTls) {
  TempDir dir;
  IoLoop loop;
  auto listener = Listener::start(
      loop.context(), "tcp:127.0.0.1:0", kToken, [](std::shared_ptr<Connection>) {}, kDeadline);
  EXPECT_FALSE(listener->encrypted());
  make_cluster_ca(dir.path() + "/tls");
  configure_tls(TlsSettings{dir.path() + "/tls", "client"});
  auto p = std::make_shared<std::promise<std::optional<Error>>>();
  async_connect(loop.context(), listener->endpoint(), kToken, kDeadline,
                [p](std::shared_ptr<Connection> c, const Error* e) {
                  if (c) c->close(Error(ErrorCode::kShutdown, "test over"));
                  p->set_value(e ? std::optional<Error>(*e) : std::nullopt);
                });
  auto f = p->get_future();
  ASSERT_EQ(f.wait_for(kDeadline + 1s), std::future_status::ready);
  configure_tls(std::nullopt);
  auto error = f.get();
  ASSERT_TRUE(error) << "a TLS client authenticated with a plaintext server";
  EXPECT_EQ(error->code(), ErrorCode::kUnauthenticated) << error->what();
  EXPECT_NE(std::string(error->what()).find("TLS handshake with " + listener->endpoint()),
            std::string::npos)
      << error->what();
  loop.run_sync([&] { listener->close(); });
  loop.stop();
}

// Forwards one TCP connection to `target` and keeps every byte that crosses, both ways.
class Relay {
 public:
  explicit Relay(const std::string& target) : target_(target) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(listen_fd_, 1);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    endpoint_ = "tcp:127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  const std::string& endpoint() const { return endpoint_; }
  std::string captured() {
    std::lock_guard<std::mutex> lock(mu_);
    return captured_;
  }

 private:
  void run() {
    int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    RawSocket server(target_);
    int fds[2] = {client, server.fd()};
    while (!stop_) {
      pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      bool done = false;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[65536];
        ssize_t n = ::recv(fds[i], buf, sizeof(buf), 0);
        if (n <= 0) {
          done = true;
          break;
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          captured_.append(buf, static_cast<size_t>(n));
        }
        for (ssize_t off = 0; off < n;) {
          ssize_t w = ::send(fds[1 - i], buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          if (w <= 0) break;
          off += w;
        }
      }
      if (done) break;
    }
    ::close(client);
  }

  std::string target_, endpoint_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string captured_;
  std::thread thread_;
};

class WireBytes : public LiveServerTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string transport() const override { return GetParam(); }
};

// A call through the relay: the marker in its arguments and reply crosses the wire as plaintext
// on "tcp" (which shows the relay sees the bytes) and never on "tls".
TEST_P(WireBytes, TheCallsArgumentsCrossAsPlaintextOnlyWithoutTls) {
  const std::string marker = "troupe-plaintext-marker-0123456789";
  std::string captured;
  {
    Relay relay(endpoint_);
    std::string direct = endpoint_;
    endpoint_ = relay.endpoint();
    std::shared_ptr<RpcPeer> peer = connect_ok();
    endpoint_ = direct;
    ASSERT_NE(peer, nullptr);
    auto f = peer->call("echo", Map{{"secret", marker + marker}}, "echo");
    ASSERT_TRUE(f.wait_for(kDeadline));
    ASSERT_FALSE(f.error()) << f.error()->what();
    EXPECT_EQ(*f.get().find("secret"), Value(marker + marker));
    peer->close(Error(ErrorCode::kShutdown, "test over"));
    captured = relay.captured();
  }
  ASSERT_GT(captured.size(), 2 * marker.size());
  bool plaintext = captured.find(marker) != std::string::npos;
  EXPECT_EQ(plaintext, GetParam() == "tcp");
}

INSTANTIATE_TEST_SUITE_P(Transport, WireBytes, ::testing::Values("tcp", "tls"), transport_name);

}  // namespace
}  // namespace troupe::transport::testing
