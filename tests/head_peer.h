// An authenticated RPC connection to a head (or any listener) in the test's process, for the
// head's unit tests. Blocks until connected; throws the connection's Error.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"

namespace troupe_test {

inline std::shared_ptr<troupe::transport::RpcPeer> connect_peer(
    troupe::transport::IoLoop& loop, const std::string& endpoint, const std::string& token,
    troupe::transport::RpcPeer::Handlers handlers = {}) {
  std::promise<std::shared_ptr<troupe::transport::Connection>> connected;
  troupe::transport::async_connect(
      loop.context(), endpoint, token, std::chrono::seconds(5),
      [&connected](std::shared_ptr<troupe::transport::Connection> c, const troupe::Error* e) {
        if (e)
          connected.set_exception(std::make_exception_ptr(*e));
        else
          connected.set_value(c);
      });
  auto c = connected.get_future().get();
  std::shared_ptr<troupe::transport::RpcPeer> peer;
  loop.run_sync([&] {
    peer = troupe::transport::RpcPeer::attach(c, troupe::wire::FrameLimits{}, std::move(handlers));
  });
  return peer;
}

}  // namespace troupe_test
