#include "controller/head_client.h"

#include "wire/head_protocol.h"

namespace troupe::internal {
namespace {

namespace control = wire::control;

class EmbeddedHeadClient : public HeadClient {
 public:
  explicit EmbeddedHeadClient(std::shared_ptr<head::Head> head)
      : owned_(std::move(head)), head_(*owned_) {}
  std::vector<head::HostRecord> hosts() override { return head_.hosts(); }
  std::vector<head::BundlePlacement> reserve(const std::string& group_id,
                                             const std::vector<head::BundleRequest>& bundles,
                                             head::Strategy strategy,
                                             std::optional<size_t> only_host) override {
    return head_.reserve(group_id, bundles, strategy, only_host);
  }
  bool release(const std::string& group_id) override { return head_.release(group_id); }
  std::vector<std::string> describe_free() override { return head_.describe_free(); }

 private:
  std::shared_ptr<head::Head> owned_;
  head::Head& head_;
};

class RemoteHeadClient : public HeadClient {
 public:
  RemoteHeadClient(std::shared_ptr<transport::RpcPeer> peer, std::string address,
                   std::chrono::milliseconds timeout)
      : peer_(std::move(peer)), address_(std::move(address)), timeout_(timeout) {}

  std::vector<head::HostRecord> hosts() override {
    std::vector<head::HostRecord> out;
    for (const auto& e : control::ListHosts::reply_from(ask(control::ListHosts::kMethod, {}))) {
      head::HostRecord r;
      r.host_name = e.host.host_name;
      r.address = e.host.address;
      r.num_cpus = e.host.num_cpus;
      r.gpu_ids = e.host.gpu_ids;
      r.labels = e.host.labels;
      r.unix_endpoint = e.host.unix_endpoint;
      r.tcp_endpoint = e.host.tcp_endpoint;
      r.agent_pid = static_cast<pid_t>(e.host.pid);
      r.machine_id = e.host.machine_id;
      r.network_id = e.host.network_id;
      r.memory_bytes = e.host.memory_bytes;
      r.alive = e.alive;
      r.registered = e.registered;
      out.push_back(std::move(r));
    }
    return out;
  }

  std::vector<head::BundlePlacement> reserve(const std::string& group_id,
                                             const std::vector<head::BundleRequest>& bundles,
                                             head::Strategy strategy,
                                             std::optional<size_t> only_host) override {
    control::Reserve m;
    m.group_id = group_id;
    for (const auto& b : bundles)
      m.bundles.push_back(control::BundleSpec{b.cpus, b.gpus, b.memory_bytes, b.labels});
    m.strategy = head::strategy_name(strategy);
    m.only_host = only_host ? static_cast<int64_t>(*only_host) : -1;
    auto reply = control::ReserveReply::from(ask(control::Reserve::kMethod, m.to_map()));
    std::vector<head::BundlePlacement> out;
    for (const auto& p : reply.bundles)
      out.push_back(head::BundlePlacement{static_cast<size_t>(p.host), p.gpu_ids, p.gpu_share});
    return out;
  }

  bool release(const std::string& group_id) override {
    return ask(control::Release::kMethod, control::Release{group_id}.to_map()).as<bool>();
  }

  std::vector<std::string> describe_free() override {
    return ask(control::DescribeFree::kMethod, {}).as<std::vector<std::string>>();
  }

 private:
  Value ask(const char* method, const Map& kwargs) {
    if (peer_->closed())
      throw Error(
          ErrorCode::kConnectionLost,
          "the head at " + address_ + " is gone: placements need it (calls to live workers go on)");
    try {
      return peer_->call(method, kwargs, std::string("head request '") + method + "'")
          .get(timeout_);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kConnectionLost || e.code() == ErrorCode::kTimeout)
        throw Error(e.code(), "the head at " + address_ + " did not answer " + method + " (" +
                                  e.message() +
                                  "): placements need it (calls to live workers go on)");
      throw;
    }
  }

  std::shared_ptr<transport::RpcPeer> peer_;
  std::string address_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<HeadClient> make_embedded_head_client(std::shared_ptr<head::Head> head) {
  return std::make_unique<EmbeddedHeadClient>(std::move(head));
}

std::unique_ptr<HeadClient> make_remote_head_client(std::shared_ptr<transport::RpcPeer> peer,
                                                    std::string address,
                                                    std::chrono::milliseconds timeout) {
  return std::make_unique<RemoteHeadClient>(std::move(peer), std::move(address), timeout);
}

}  // namespace troupe::internal
