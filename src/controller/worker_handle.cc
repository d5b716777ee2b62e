#include "common/timeline.h"
#include "controller/cluster_impl.h"
#include "controller/worker_state.h"
#include "store/shm_object.h"

namespace troupe {
namespace internal {

WorkerState::WorkerState(asio::io_context& io, std::string name, std::string class_name,
                         size_t host, std::string host_name)
    : name_(std::move(name)),
      class_name_(std::move(class_name)),
      host_(host),
      host_name_(std::move(host_name)),
      io_(io),
      ready_(std::make_shared<internal::FutureState>("start of worker '" + name_ + "'")),
      died_(std::make_shared<internal::FutureState>("death of worker '" + name_ + "'")) {}

pid_t WorkerState::pid() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pid_;
}

uint64_t WorkerState::start_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return start_time_;
}

std::vector<int> WorkerState::gpus() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gpus_;
}

bool WorkerState::alive() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_ != Status::kDead;
}

std::string WorkerState::exit_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exit_status_;
}

std::string WorkerState::log_path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_path_;
}

std::shared_ptr<WorkerClient> WorkerState::client() const {
  std::lock_guard<std::mutex> lock(mu_);
  return client_;
}

std::string WorkerState::describe_locked() const {
  std::string s = "worker '" + name_ + "' (";
  if (!group.empty()) s += "group " + group + ", rank " + std::to_string(rank) + ", ";
  s += "class " + class_name_ + ", host " + host_name_;
  if (pid_) s += ", pid " + std::to_string(pid_);
  return s + ")";
}

std::string WorkerState::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return describe_locked();
}

void WorkerState::record_span(std::string_view cat, std::string_view name, int64_t start_ns) const {
  if (!record_timeline) return;
  auto e = timeline::make(timeline::Kind::kSpan, cat, name, start_ns, timeline::now_ns() - start_ns,
                          name_);
  e.pid = static_cast<int32_t>(pid());
  e.host = static_cast<int32_t>(host_);
  e.scope = timeline_scope;
  timeline::record(e);
}

void WorkerState::record_instant(std::string_view cat, std::string_view name,
                                 std::string_view detail) const {
  if (!record_timeline) return;
  auto e = timeline::make(timeline::Kind::kInstant, cat, name, timeline::now_ns(), 0, detail);
  e.pid = static_cast<int32_t>(pid());
  e.host = static_cast<int32_t>(host_);
  e.scope = timeline_scope;
  timeline::record(e);
}

Error WorkerState::death_error(const std::string& cause) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (death_) return *death_;
  return Error(ErrorCode::kWorkerDied, describe_locked() + " died: " + cause);
}

Future<Value> WorkerState::call(const std::string& method, const Kwargs& kwargs,
                                WorkerClient::StreamHandler on_item) {
  return submit({method, kwargs, nullptr, std::move(on_item), nullptr});
}

Future<Value> WorkerState::call_encoded(const std::string& method,
                                        std::shared_ptr<const wire::EncodedKwargs> kwargs,
                                        WorkerClient::StreamHandler on_item) {
  return submit({method, {}, std::move(kwargs), std::move(on_item), nullptr});
}

namespace {

// Counts the completion of a call made at `made` (driver_metrics.h).
void measure(const Future<Value>& f, MethodMetrics* m, std::chrono::steady_clock::time_point made) {
  f.then([m, made](const Future<Value>& done) {
    (done.error() ? m->failed : m->finished).inc();
    m->latency.observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - made).count());
  });
}

}  // namespace

MethodMetrics* WorkerState::method_metrics_locked(const std::string& method) {
  auto& m = method_metrics_[method];
  if (!m) m = metrics->of(method, group);
  return m;
}

Future<Value> WorkerState::submit(QueuedCall call) {
  const auto made =
      metrics ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  std::vector<Bytes> pins;  // store objects this call uses: held until it completes
  if (store && !call.encoded) {
    Map rewritten;
    try {
      if (store->prepare(call.kwargs, rewritten, pins, store_target))
        call.kwargs = std::move(rewritten);
    } catch (const Error& e) {
      Future<Value> failed = make_failed_future(Error(
          e.code(), "method '" + call.method + "' of worker '" + name_ + "': " + e.message()));
      if (metrics) {
        MethodMetrics* m = metrics->of(call.method, group);
        m->started.inc();
        measure(failed, m, made);
      }
      return failed;
    }
  }
  MethodMetrics* measured = nullptr;
  Future<Value> f = submit_now(std::move(call), metrics ? &measured : nullptr);
  if (measured) measure(f, measured, made);
  if (!pins.empty()) f.then([pins = std::move(pins)](const Future<Value>&) {});
  return f;
}

Future<Value> WorkerState::submit_now(QueuedCall call, MethodMetrics** measured) {
  std::shared_ptr<WorkerClient> client;
  const int64_t send_start = record_timeline ? timeline::now_ns() : 0;
  pid_t pid = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (measured) {
      *measured = method_metrics_locked(call.method);
      (*measured)->started.inc();
    }
    if (status_ == Status::kDead) return make_failed_future(*death_);
    if (status_ != Status::kReady) {
      call.state = std::make_shared<internal::FutureState>("method '" + call.method + "' of " +
                                                           describe_locked());
      auto future = FutureAccess::make(call.state);
      if (status_ == Status::kDying)
        orphans_.push_back(call.state);
      else
        queued_.push_back(std::move(call));
      return future;
    }
    client = client_;
    pid = pid_;
  }
  std::string context = "method '" + call.method + "' of worker '" + name_ + "'";
  Future<Value> sent =
      call.encoded
          ? client->call_encoded(call.method, *call.encoded, std::move(context),
                                 std::move(call.on_item))
          : client->call(call.method, call.kwargs, std::move(context), std::move(call.on_item));
  if (send_start) {  // the send's span on the driver (pid and host name the worker's track)
    auto e = timeline::make(timeline::Kind::kSpan, "send", call.method, send_start,
                            timeline::now_ns() - send_start, name_);
    e.pid = static_cast<int32_t>(pid);
    e.host = static_cast<int32_t>(host_);
    e.scope = timeline_scope;
    timeline::record(e);
  }
  return sent;
}

std::string WorkerState::tcp_endpoint() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tcp_endpoint_;
}

void WorkerState::on_started(pid_t pid, uint64_t start_time, std::vector<int> gpus,
                             std::string log_path, std::string tcp_endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  tcp_endpoint_ = std::move(tcp_endpoint);
  pid_ = pid;
  start_time_ = start_time;
  gpus_ = std::move(gpus);
  log_path_ = std::move(log_path);
}

void WorkerState::on_connected(std::shared_ptr<WorkerClient> client, const Kwargs& ctor_args,
                               bool construct) {
  std::weak_ptr<WorkerState> weak = weak_from_this();
  client->on_connection_lost(
      [weak](std::vector<std::shared_ptr<internal::FutureState>> pending, const Error& reason) {
        if (auto self = weak.lock()) {
          self->on_connection_lost(std::move(pending), reason);
        } else {
          for (auto& p : pending) p->set_error(Error(ErrorCode::kWorkerDied, reason.message()));
        }
      },
      [weak](const Error& reason) {
        auto self = weak.lock();
        return self ? self->death_error(reason.message())
                    : Error(ErrorCode::kWorkerDied, reason.message());
      });
  // Sent under the lock, so that __init__ and the queued calls precede every later call; their
  // futures are tied to the callers' after it (a fake client completes calls at once).
  Future<Value> init;
  std::vector<std::pair<Future<Value>, std::shared_ptr<internal::FutureState>>> sent;
  std::optional<Error> dead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_ == Status::kDead) {
      dead = *death_;
    } else {
      client_ = client;
      Map init_args{
          {"class", class_name_}, {"args", Value(ctor_args)}, {"timeline", record_timeline}};
      if (store && store_target == DriverStore::kLocal && store->threshold() > 0) {
        // Large results come back through the store of this host.
        client->set_response_filter([](Value& v) { store::resolve_markers(v, /*remove=*/true); });
        init_args.emplace_back("store_threshold", static_cast<int64_t>(store->threshold()));
      }
      init = construct
                 ? client->call("__init__", init_args, "start of " + describe_locked(), nullptr)
                 : make_ready_future(Value());
      sent.reserve(queued_.size());
      for (auto& q : queued_)
        sent.emplace_back(
            q.encoded ? client->call_encoded(q.method, *q.encoded, q.state->context(), q.on_item)
                      : client->call(q.method, q.kwargs, q.state->context(), q.on_item),
            q.state);
      queued_.clear();
      status_ = Status::kReady;
    }
  }
  if (dead) return client->close(*dead);
  init.then([ready = ready_](const Future<Value>& f) {
    if (auto e = f.error())
      ready->set_error(*e);
    else
      ready->set_value(Value());
  });
  for (auto& [f, state] : sent)
    f.then([state = state](const Future<Value>& done) {
      if (auto e = done.error())
        state->set_error(*e);
      else
        state->set_value(done.get());
    });
}

void WorkerState::on_connection_lost(std::vector<std::shared_ptr<internal::FutureState>> pending,
                                     const Error& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_ != Status::kDead) {
      status_ = Status::kDying;
      for (auto& p : pending) orphans_.push_back(std::move(p));
      report_timer_ = std::make_unique<asio::steady_timer>(io_, kExitReportWait);
      std::weak_ptr<WorkerState> weak = weak_from_this();
      report_timer_->async_wait([weak, reason](const asio::error_code& ec) {
        if (ec) return;
        if (auto self = weak.lock()) self->mark_dead(self->death_error(reason.message()));
      });
      return;
    }
  }
  for (auto& p : pending) p->set_error(*death_);
}

void WorkerState::mark_dead(const Error& error) {
  std::vector<QueuedCall> queued;
  std::vector<std::shared_ptr<internal::FutureState>> orphans;
  std::shared_ptr<WorkerClient> client;
  // Destroyed here, not with the state: a Worker handle may outlive its Cluster and the
  // io_context the timer belongs to.
  std::unique_ptr<asio::steady_timer> report_timer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_ == Status::kDead) return;
    status_ = Status::kDead;
    death_ = error;
    queued.swap(queued_);
    orphans.swap(orphans_);
    client.swap(client_);
    report_timer.swap(report_timer_);
  }
  if (report_timer) report_timer->cancel();
  record_instant("death", "death", error.message());
  ready_->set_error(error);
  died_->set_value(error.message());
  for (auto& q : queued) q.state->set_error(error);
  for (auto& o : orphans) o->set_error(error);
  if (client) client->close(error);
  if (on_dead) on_dead();
}

void WorkerState::on_exit_report(const std::string& status,
                                 const std::vector<std::string>& stderr_tail) {
  std::string tail;
  for (const auto& l : stderr_tail) tail += "\n  " + l;
  Error error(ErrorCode::kWorkerDied, "");
  {
    std::lock_guard<std::mutex> lock(mu_);
    exit_status_ = status;
    error = Error(ErrorCode::kWorkerDied,
                  describe_locked() + " died: " + status +
                      (tail.empty() ? "" : "; last lines of its stderr:" + tail));
  }
  mark_dead(error);
}

}  // namespace internal

const std::string& Worker::name() const { return state_->name(); }
const std::string& Worker::class_name() const { return state_->class_name(); }
size_t Worker::host() const { return state_->host(); }
pid_t Worker::pid() const { return state_->pid(); }
std::vector<int> Worker::gpus() const { return state_->gpus(); }
std::string Worker::log_path() const { return state_->log_path(); }
Future<void> Worker::ready() const { return state_->ready(); }
bool Worker::alive() const { return state_->alive(); }

Future<Value> Worker::call_value(const std::string& method, const Kwargs& kwargs) const {
  return state_->call(method, kwargs);
}

ValueStream Worker::call_stream(const std::string& method, const Kwargs& kwargs) const {
  auto state = std::make_shared<internal::Access::StreamState>();
  auto on_item = [state](Value item) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->items.push_back(std::move(item));
    }
    state->cv.notify_all();
  };
  Future<Value> done = state_->call(method, kwargs, on_item);
  done.then([state](const Future<Value>&) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->ended = true;
    }
    state->cv.notify_all();
  });
  return internal::Access::stream(state, done);
}

std::string Worker::stop(std::chrono::milliseconds grace) const {
  return internal::ClusterImpl::stop_workers({state_}, grace).front();
}

Future<std::string> Worker::died() const { return state_->died(); }
const std::string& Worker::agent_name() const { return state_->agent_name; }
std::string Worker::tcp_endpoint() const { return state_->tcp_endpoint(); }

}  // namespace troupe
