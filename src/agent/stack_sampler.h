// Samples the stacks of running workers for `dump_stacks` (wire/control.h): per worker the call
// on its call-status page (common/call_status.h), the Python stack of every Python thread and
// the native stack of every thread.
//
// I/O thread of the agent only; never blocks it. Per worker, in order:
//   1. the call-status page (read, never asking the worker);
//   2. Python workers (those that catch kPythonStacksSignal, per /proc/PID/status SigCgt): the
//      stack file is emptied, the worker signalled, and the file polled until the end marker the
//      worker writes after faulthandler's dump (python/troupe/_role.py) is there;
//   3. `eu-stack -p PID` (elfutils), a child of the agent, its output read from a pipe.
// SS-1 (deadline): `done` runs once, by the deadline given to sample(), whatever the workers do
//      (stopped, looping with signals blocked): a part not finished by then is reported in the
//      worker's `errors` with the process's state, and its eu-stack is killed.
// SS-2 (bounded): each stack is cut at kMaxStackBytes.
// SS-3 (only the worker's): a pid read from a page the worker writes is used only when it is
//      in the process group the worker leads (an unreaped child of the agent, so the group is
//      ours); else the leader itself is sampled.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wire/control.h"

namespace troupe::agent {

// The signal that asks a Python worker for its stacks (a real-time one: nobody else's).
int python_stacks_signal();
// Marks the end of a Python worker's dump in its stack file.
constexpr const char* kPythonStacksEnd = "\n-- troupe: end of Python stacks --\n";
constexpr size_t kMaxStackBytes = 256 << 10;

struct StackTarget {
  wire::control::WorkerStacks labels;  // name, host, group, rank and pid (the leader) set
  int stacks_dir_fd = -1;              // holds its call-status page and Python stack file
  std::string status_file, python_file;
};

class StackSampler {
 public:
  explicit StackSampler(asio::io_context& io) : io_(io) {}
  ~StackSampler();

  // SS-1: `done` gets every target's stacks, in order, by `deadline` at the latest.
  void sample(std::vector<StackTarget> targets, std::chrono::milliseconds deadline,
              std::function<void(wire::control::DumpStacksReply)> done);
  // The agent's reaper: reaps `pid` and returns true when it is one of the eu-stack processes.
  bool reap_if_mine(pid_t pid);

 private:
  struct Job;
  struct Native;
  void python_step(const std::shared_ptr<Job>& job, size_t i, pid_t pid);
  void poll_python(const std::shared_ptr<Job>& job, size_t i, pid_t pid);
  void native_step(const std::shared_ptr<Job>& job, size_t i, pid_t pid);
  void read_native(const std::shared_ptr<Native>& n);
  void finish_native(const std::shared_ptr<Native>& n);
  void part_done(const std::shared_ptr<Job>& job);

  asio::io_context& io_;
  std::map<pid_t, std::shared_ptr<Native>> running_;  // eu-stack processes not reaped yet
};

}  // namespace troupe::agent
