// The process under attack in transport_flood_test: a real Listener whose authenticated
// connections get an RpcPeer serving "echo" (replies with its kwargs), with the default frame
// limits and handshake timeout of the agents and workers.
//
// Usage: troupe_test_flood_server ENDPOINT TOKEN [FRAME_STALL_MS]
// Prints "endpoint <bound endpoint>" on stdout once listening, then serves until its stdin
// reaches end of file (the test closes the pipe, or dies), and exits 0. Logs go to stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"

using namespace troupe;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ENDPOINT TOKEN [FRAME_STALL_MS]\n", argv[0]);
    return 2;
  }
  log::set_role("flood-server");
  std::chrono::milliseconds stall = transport::kDefaultFrameStallTimeout;
  if (argc > 3) stall = std::chrono::milliseconds(std::atoll(argv[3]));
  transport::IoLoop loop;
  std::mutex mu;
  std::vector<std::shared_ptr<transport::RpcPeer>> peers;
  std::shared_ptr<transport::Listener> listener;
  try {
    listener = transport::Listener::start(
        loop.context(), argv[1], argv[2], [&](std::shared_ptr<transport::Connection> c) {
          transport::RpcPeer::Handlers h;
          h.on_request = [](wire::Request&& r, const transport::Responder& responder) {
            if (r.method == "echo")
              responder.reply(Value(std::move(r.kwargs)));
            else
              responder.fail(Error(ErrorCode::kUnknownMethod, r.method));
          };
          c->set_stall_timeout(stall);
          auto peer = transport::RpcPeer::attach(c, wire::FrameLimits{}, std::move(h));
          std::lock_guard<std::mutex> lock(mu);
          peers.push_back(peer);
        });
  } catch (const Error& e) {
    std::fprintf(stderr, "flood server: %s\n", e.what());
    return 1;
  }
  std::printf("endpoint %s\n", listener->endpoint().c_str());
  std::fflush(stdout);
  char buf[64];
  while (::read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
  }
  loop.run_sync([&] { listener->close(); });
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& p : peers) p->close(Error(ErrorCode::kShutdown, "flood server exits"));
  }
  loop.run_sync([] {});
  loop.stop();
  return 0;
}
