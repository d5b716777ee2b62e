// A raw client connection to an agent of an embedded cluster, as `troupe status` makes one: for
// tests that ask an agent directly or send it what a driver never would.
#pragma once

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <string>

#include "common/token.h"
#include "controller/session_dir.h"
#include "transport/connection.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "troupe/troupe.h"

namespace troupe_test {

// The Unix endpoint of the agent of `host` of the embedded cluster.
inline std::string agent_endpoint(const troupe::Cluster& cluster, size_t host) {
  return "unix:" + troupe::internal::socket_dir_of(cluster.session_dir()) + "/agent-" +
         cluster.hosts()[host].name + ".sock";
}

// The cluster's token, from its session directory.
inline std::string cluster_token(const troupe::Cluster& cluster) {
  return troupe::token::read_file(cluster.session_dir() + "/token");
}

// An authenticated connection to `endpoint`, run by `loop` (which must outlive it). Blocks until
// connected; throws the connection's Error.
inline std::shared_ptr<troupe::transport::RpcPeer> connect_agent(troupe::transport::IoLoop& loop,
                                                                 const std::string& endpoint,
                                                                 const std::string& token) {
  std::promise<std::shared_ptr<troupe::transport::RpcPeer>> connected;
  troupe::transport::async_connect(
      loop.context(), endpoint, token, std::chrono::seconds(5),
      [&connected](std::shared_ptr<troupe::transport::Connection> c, const troupe::Error* error) {
        if (error)
          connected.set_exception(std::make_exception_ptr(*error));
        else
          connected.set_value(
              troupe::transport::RpcPeer::attach(c, troupe::wire::FrameLimits{}, {}));
      });
  return connected.get_future().get();
}

}  // namespace troupe_test
