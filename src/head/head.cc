#include "head/head.h"

#include "common/log.h"
#include "wire/control.h"

namespace troupe::head {
namespace {

HostCapacity capacity_of(const HostRecord& h) {
  return HostCapacity{h.host_name, h.num_cpus, h.gpu_ids, h.memory_bytes, h.labels, h.alive};
}

}  // namespace

Head::Head(asio::io_context& io, const std::string& endpoint, std::string token)
    : token_(std::move(token)) {
  listener_ = transport::Listener::start(
      io, endpoint, token_, [this](std::shared_ptr<transport::Connection> c) { on_connection(c); });
}

Head::~Head() { close(); }

void Head::set_status_provider(std::function<Value()> provider) {
  std::lock_guard<std::mutex> lock(mu_);
  status_provider_ = std::move(provider);
}

void Head::close() {
  listener_->close();
  std::thread status_thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_provider_ = nullptr;
    closing_ = true;
    status_thread.swap(status_thread_);
  }
  cv_.notify_all();
  if (status_thread.joinable()) status_thread.join();
  std::vector<std::shared_ptr<transport::RpcPeer>> agents;
  {
    std::lock_guard<std::mutex> lock(mu_);
    agents.swap(agents_);
    on_host_lost_ = nullptr;
  }
  for (auto& a : agents) a->close(Error(ErrorCode::kShutdown, "head closed"));
}

void Head::on_connection(std::shared_ptr<transport::Connection> connection) {
  auto index = std::make_shared<int>(-1);
  transport::RpcPeer::Handlers h;
  h.on_request = [this, index](wire::Request&& r, const transport::Responder& resp) {
    if (r.method == "status") {
      std::lock_guard<std::mutex> lock(mu_);
      if (!status_provider_) {
        resp.fail(Error(ErrorCode::kUnknownMethod, "this head has no status"));
        return;
      }
      status_queue_.push_back(resp);
      if (!status_thread_.joinable()) status_thread_ = std::thread([this] { serve_status(); });
      cv_.notify_all();
      return;
    }
    if (r.method != wire::control::RegisterAgent::kMethod) {
      resp.fail(Error(ErrorCode::kUnknownMethod, "the head has no method '" + r.method + "'"));
      return;
    }
    HostRecord rec;
    try {
      auto m = wire::control::RegisterAgent::from(r.kwargs);
      if (m.host_name.empty()) throw Error(ErrorCode::kInvalidArgument, "host_name is empty");
      rec.host_name = m.host_name;
      rec.address = m.address;
      rec.num_cpus = m.num_cpus;
      rec.gpu_ids = m.gpu_ids;
      rec.labels = m.labels;
      rec.unix_endpoint = m.unix_endpoint;
      rec.tcp_endpoint = m.tcp_endpoint;
      rec.agent_pid = static_cast<pid_t>(m.pid);
      rec.machine_id = m.machine_id;
      rec.memory_bytes = m.memory_bytes;
      ResourceBook valid({capacity_of(rec)});  // finite, non-negative, distinct GPU ids
    } catch (const Error& e) {
      resp.fail(Error(ErrorCode::kInvalidArgument, e.message()));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& h : hosts_)
        if (h.host_name == rec.host_name && h.alive) {
          resp.fail(Error(ErrorCode::kInvalidArgument,
                          "a host named '" + rec.host_name + "' is already registered"));
          return;
        }
      // A host the head was told to expect takes its reserved id; any other gets the next.
      *index = -1;
      for (size_t i = 0; i < hosts_.size() && *index < 0; ++i)
        if (!hosts_[i].registered && hosts_[i].host_name == rec.host_name)
          *index = static_cast<int>(i);
      if (*index < 0) {
        *index = static_cast<int>(hosts_.size());
        hosts_.push_back(rec);
      } else {
        hosts_[*index] = rec;
      }
      // A host that joins after the first reservation is placed on too.
      if (book_) book_->upsert_host(*index, capacity_of(rec));
      ++registered_;
    }
    TROUPE_LOG(Info) << "host " << rec.host_name << " registered (" << rec.address << ", "
                     << rec.num_cpus << " CPUs, " << rec.gpu_ids.size() << " GPUs)";
    cv_.notify_all();
    resp.reply(wire::control::RegisterAgentReply{*index}.to_value());
  };
  h.on_close = [this, index](const Error& reason) {
    std::function<void(const HostRecord&)> callback;
    HostRecord rec;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (*index < 0 || *index >= static_cast<int>(hosts_.size())) return;
      hosts_[*index].alive = false;
      --registered_;
      if (book_ && static_cast<size_t>(*index) < book_->hosts().size())
        book_->set_host_alive(*index, false);
      rec = hosts_[*index];
      callback = on_host_lost_;
    }
    TROUPE_LOG(Info) << "host " << rec.host_name << " left: " << reason.message();
    if (callback) callback(rec);
  };
  // The connection forgets itself when it closes, so that clients that come and go (each
  // `troupe status`) leave nothing behind.
  auto self = std::make_shared<std::weak_ptr<transport::RpcPeer>>();
  h.on_close = [this, index, self, lost = std::move(h.on_close)](const Error& reason) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto peer = self->lock()) std::erase(agents_, peer);
    }
    lost(reason);
  };
  auto peer = transport::RpcPeer::attach(connection, wire::FrameLimits{}, std::move(h));
  *self = peer;
  std::lock_guard<std::mutex> lock(mu_);
  if (!peer->closed()) agents_.push_back(peer);
}

void Head::serve_status() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return closing_ || !status_queue_.empty(); });
    if (status_queue_.empty()) return;  // closing
    transport::Responder resp = std::move(status_queue_.front());
    status_queue_.pop_front();
    auto provider = status_provider_;
    lock.unlock();
    try {
      if (!provider) throw Error(ErrorCode::kShutdown, "the head is closing");
      resp.reply(provider());
    } catch (const Error& e) {
      resp.fail(e);
    }
    lock.lock();
  }
}

void Head::wait_for_hosts(size_t count, Clock::time_point deadline,
                          const std::function<std::string()>& abort) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (registered_ >= count) return;
    lock.unlock();
    std::string why = abort ? abort() : "";
    lock.lock();
    if (!why.empty()) throw Error(ErrorCode::kWorkerDied, why);
    if (Clock::now() >= deadline) {
      std::string missing;
      for (const auto& h : hosts_)
        if (!h.registered) missing += (missing.empty() ? "" : ", ") + h.host_name;
      throw Error(ErrorCode::kTimeout, std::to_string(registered_) + " of " +
                                           std::to_string(count) +
                                           " agents registered before the deadline" +
                                           (missing.empty() ? "" : " (missing: " + missing + ")"));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

void Head::expect_hosts(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!hosts_.empty())
    throw Error(ErrorCode::kInvalidArgument, "expect_hosts must come before any registration");
  for (const auto& name : names) {
    HostRecord r;
    r.host_name = name;
    r.alive = false;
    r.registered = false;
    hosts_.push_back(std::move(r));
  }
}

std::vector<HostRecord> Head::hosts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hosts_;
}

void Head::set_on_host_lost(std::function<void(const HostRecord&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  on_host_lost_ = std::move(callback);
}

}  // namespace troupe::head

namespace troupe::head {

std::vector<BundlePlacement> Head::reserve(const std::string& group_id,
                                           const std::vector<BundleRequest>& bundles,
                                           Strategy strategy, std::optional<size_t> only_host) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!book_) {
    std::vector<HostCapacity> capacity;
    for (const auto& h : hosts_) capacity.push_back(capacity_of(h));
    book_ = std::make_unique<ResourceBook>(std::move(capacity));
  }
  return book_->reserve(group_id, bundles, strategy, only_host);
}

bool Head::release(const std::string& group_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return book_ && book_->release(group_id);
}

std::vector<std::string> Head::describe_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  if (book_)
    for (size_t i = 0; i < book_->hosts().size(); ++i) out.push_back(book_->describe_free(i));
  return out;
}

}  // namespace troupe::head
