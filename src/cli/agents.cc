#include "cli/agents.h"

#include <future>

#include "transport/listener.h"

namespace troupe::cli {
namespace {

std::string host_field(const Value* v) {
  return v && v->is_string() ? v->as_string() : std::string();
}

std::chrono::milliseconds left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

}  // namespace

std::vector<AgentHost> hosts_of(const Value& head_status) {
  std::vector<AgentHost> out;
  const Value* hosts = head_status.is_map() ? head_status.find("hosts") : nullptr;
  if (!hosts || !hosts->is_array()) return out;
  for (const auto& h : hosts->as_array()) {
    if (!h.is_map()) continue;
    const Value* alive = h.find("alive");
    out.push_back(AgentHost{host_field(h.find("name")), host_field(h.find("tcp_endpoint")),
                            alive && alive->is_bool() && alive->as_bool()});
  }
  return out;
}

Agents::Agents(std::vector<AgentHost> hosts, const std::string& token, Clock::time_point deadline)
    : hosts_(std::move(hosts)), peers_(hosts_.size()), errors_(hosts_.size()) {
  const auto since = Clock::now();
  using Connected = std::promise<std::shared_ptr<transport::RpcPeer>>;
  std::vector<std::shared_ptr<Connected>> pending(hosts_.size());
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (!hosts_[i].head_says_up) {
      errors_[i] = "the head says " + hosts_[i].name + " is lost";
      continue;
    }
    if (hosts_[i].endpoint.empty()) {
      errors_[i] = "the head knows no address of the agent of " + hosts_[i].name;
      continue;
    }
    auto connected = pending[i] = std::make_shared<Connected>();
    // The callback may run after the deadline passed (its own timeout is later, so that the
    // wait below names the deadline): it owns what it fills in.
    transport::async_connect(
        loop_.context(), hosts_[i].endpoint, token, left(deadline) + std::chrono::seconds(1),
        [connected](std::shared_ptr<transport::Connection> c, const Error* error) {
          if (error)
            connected->set_exception(std::make_exception_ptr(*error));
          else
            connected->set_value(transport::RpcPeer::attach(c, wire::FrameLimits{}, {}));
        });
  }
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (!pending[i]) continue;
    auto f = pending[i]->get_future();
    if (f.wait_until(deadline) != std::future_status::ready) {
      errors_[i] = late(i, "did not connect", since);
      continue;
    }
    try {
      peers_[i] = f.get();
    } catch (const Error& e) {
      errors_[i] = e.message();
    }
  }
}

Agents::~Agents() {
  loop_.run_sync([this] {
    for (auto& p : peers_)
      if (p) p->close(Error(ErrorCode::kShutdown, "done"));
  });
  loop_.run_sync([] {});  // let the closes run before the loop stops
}

std::string Agents::late(size_t host, const char* what, Clock::time_point since) const {
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since);
  return "the agent of " + hosts_[host].name + " at " + hosts_[host].endpoint + " " + what +
         " within " + std::to_string(waited.count()) + " ms";
}

std::optional<Future<Value>> Agents::send(size_t host, const Call& call, std::string& error) {
  if (!peers_[host]) {
    error = errors_[host];
    return std::nullopt;
  }
  return peers_[host]->call(call.method, call.kwargs,
                            call.method + " of the agent of " + hosts_[host].name);
}

std::vector<std::vector<Agents::Answer>> Agents::ask_all(const std::vector<Call>& calls,
                                                         Clock::time_point deadline) {
  return ask_lists(std::vector<std::vector<Call>>(hosts_.size(), calls), deadline);
}

std::vector<std::vector<Agents::Answer>> Agents::ask_lists(
    const std::vector<std::vector<Call>>& calls, Clock::time_point deadline) {
  const auto since = Clock::now();
  std::vector<std::vector<Answer>> answers(hosts_.size());
  std::vector<std::vector<std::optional<Future<Value>>>> futures(hosts_.size());
  for (size_t h = 0; h < hosts_.size() && h < calls.size(); ++h) {
    answers[h].resize(calls[h].size());
    for (size_t c = 0; c < calls[h].size(); ++c)
      futures[h].push_back(send(h, calls[h][c], answers[h][c].error));
  }
  for (size_t h = 0; h < hosts_.size(); ++h)
    for (size_t c = 0; c < futures[h].size(); ++c) {
      auto& f = futures[h][c];
      if (!f) continue;
      if (!f->wait_for(deadline - Clock::now())) {
        answers[h][c].error = late(h, "did not answer", since);
      } else if (auto e = f->error()) {
        answers[h][c].error = e->message();
      } else {
        answers[h][c].value = f->get();
      }
    }
  return answers;
}

std::vector<Agents::Answer> Agents::ask_each(const std::vector<std::optional<Call>>& calls,
                                             Clock::time_point deadline) {
  const auto since = Clock::now();
  std::vector<Answer> answers(hosts_.size());
  std::vector<std::optional<Future<Value>>> futures(hosts_.size());
  for (size_t h = 0; h < hosts_.size() && h < calls.size(); ++h)
    if (calls[h]) futures[h] = send(h, *calls[h], answers[h].error);
  for (size_t h = 0; h < hosts_.size(); ++h) {
    auto& f = futures[h];
    if (!f) continue;
    if (!f->wait_for(deadline - Clock::now()))
      answers[h].error = late(h, "did not answer", since);
    else if (auto e = f->error())
      answers[h].error = e->message();
    else
      answers[h].value = f->get();
  }
  return answers;
}

Value Agents::ask(size_t host, const Call& call, Clock::time_point deadline) {
  std::string error;
  auto f = send(host, call, error);
  if (!f) throw Error(ErrorCode::kConnectionLost, error);
  const auto since = Clock::now();
  if (!f->wait_for(deadline - Clock::now()))
    throw Error(ErrorCode::kTimeout, late(host, "did not answer", since));
  return f->get();  // throws the agent's error
}

}  // namespace troupe::cli
