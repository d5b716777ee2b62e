// Stacks of a hang, from the driver: WorkerGroup::dump_stacks (through the workers' agents, as
// `troupe stack` does) and MultiWorkerFuture::get(timeout), whose error names the workers that
// have not answered.
#include <cstdio>
#include <map>

#include "controller/access.h"
#include "controller/worker_group_impl.h"
#include "controller/worker_state.h"
#include "troupe/worker_group.h"
#include "wire/control.h"

namespace troupe {
namespace {

namespace control = wire::control;

std::string seconds(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s",
                std::chrono::duration_cast<std::chrono::duration<double>>(d).count());
  return text;
}

WorkerStackDump dump_of(size_t rank, const internal::WorkerState& state,
                        control::WorkerStacks stacks) {
  WorkerStackDump d;
  d.rank = rank;
  d.name = state.name();
  d.host = state.host_name();
  d.pid = stacks.pid ? stacks.pid : state.pid();
  d.call = stacks.call;
  d.call_duration = std::chrono::milliseconds(stacks.call_ms);
  d.python = stacks.python;
  d.native = stacks.native;
  d.errors = stacks.errors;
  stacks.host = d.host;
  stacks.pid = d.pid;
  d.text = stacks.describe(state.name());
  return d;
}

}  // namespace

std::vector<WorkerStackDump> WorkerGroup::dump_stacks() const {
  const auto deadline = Clock::now() + kDumpStacksTimeout;
  std::vector<Worker> workers = this->workers();
  // One request per agent, all at once.
  struct PerAgent {
    std::shared_ptr<internal::AgentClient> agent;
    control::DumpStacks request;
    std::optional<internal::AgentReply<control::DumpStacksReply>> reply;
  };
  std::map<internal::AgentClient*, PerAgent> agents;
  std::vector<std::shared_ptr<internal::WorkerState>> states;
  for (const auto& w : workers) {
    states.push_back(internal::Access::state(w));
    if (auto agent = states.back()->agent.lock()) {
      auto& a = agents[agent.get()];
      a.agent = agent;
      a.request.names.push_back(states.back()->agent_name);
    }
  }
  for (auto& [key, a] : agents) a.reply = a.agent->dump_stacks(a.request);
  std::vector<WorkerStackDump> out;
  for (size_t rank = 0; rank < states.size(); ++rank) {
    const auto& state = *states[rank];
    control::WorkerStacks stacks;
    stacks.name = state.name();
    stacks.host = state.host_name();
    stacks.group = name();
    stacks.rank = static_cast<int64_t>(rank);
    auto agent = state.agent.lock();
    auto it = agent ? agents.find(agent.get()) : agents.end();
    if (it == agents.end()) {
      stacks.errors.push_back("its agent is gone");
    } else if (!it->second.reply->wait_until(deadline)) {
      stacks.errors.push_back("the agent of " + state.host_name() + " did not answer within " +
                              std::to_string(kDumpStacksTimeout.count()) + " ms");
    } else {
      try {
        bool found = false;
        for (auto& s : it->second.reply->get(std::chrono::milliseconds(0)).workers)
          if (s.name == state.agent_name) {
            found = true;
            stacks = std::move(s);
          }
        if (!found) stacks.errors.push_back("its agent does not list it");
      } catch (const Error& e) {
        stacks.errors.push_back(e.message());
      }
    }
    out.push_back(dump_of(rank, state, std::move(stacks)));
  }
  return out;
}

void MultiWorkerFuture::set_call_info(std::string method,
                                      std::function<std::string(size_t worker)> describe) {
  method_ = std::move(method);
  describe_ = std::move(describe);
  sent_ = std::chrono::steady_clock::now();
}

std::vector<Value> MultiWorkerFuture::get(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  std::vector<size_t> pending;
  for (size_t i = 0; i < futures_.size(); ++i)
    if (!futures_[i].wait_until(deadline)) pending.push_back(i);
  if (pending.empty()) return get();
  std::string message = "no answer within " + std::to_string(timeout.count()) + " ms from " +
                        std::to_string(pending.size()) + " of " + std::to_string(futures_.size()) +
                        " workers";
  if (!method_.empty())
    message += " to the call of '" + method_ + "' (sent " +
               seconds(std::chrono::steady_clock::now() - sent_) + " ago)";
  message += "; still running:";
  for (size_t i : pending) {
    const size_t worker = called_workers_[i];
    message +=
        "\n  " + (describe_ ? describe_(worker)
                            : "worker " + std::to_string(worker) + ": " + futures_[i].context());
  }
  throw Error(ErrorCode::kTimeout, message);
}

}  // namespace troupe
