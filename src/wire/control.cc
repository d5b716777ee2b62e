#include "wire/control.h"

#include <cstdio>

namespace troupe::wire::control {

FieldReader::FieldReader(std::string message, const Value& value)
    : message_(std::move(message)), map_(value) {
  if (!map_.is_map())
    throw Error(ErrorCode::kInvalidArgument, message_ + ": expected a map of fields, got " +
                                                 std::string(value_type_name(map_.type())));
}

Error FieldReader::missing(const char* key) const {
  return Error(ErrorCode::kInvalidArgument, message_ + ": field '" + key + "' is missing");
}

Error FieldReader::bad_field(const char* key, const std::string& why) const {
  return Error(ErrorCode::kInvalidArgument, message_ + ": field '" + key + "': " + why);
}

Map StartWorker::to_map(bool with_shared_env) const {
  Map m{{"name", name},
        {"gpus", troupe::to_value(gpus)},
        {"num_gpus", num_gpus},
        {"wrapper", troupe::to_value(wrapper)},
        {"take_ports", troupe::to_value(take_ports)},
        {"log_to_terminal", log_to_terminal},
        {"start_timeout_ms", start_timeout_ms},
        {"executable", executable},
        {"args", troupe::to_value(args)},
        {"env", troupe::to_value(env)},
        {"shared_env_id", shared_env_id},
        {"fork_server", fork_server},
        {"python_fork", python_fork},
        {"python_preload", troupe::to_value(python_preload)},
        {"detached", detached}};
  if (with_shared_env && !shared_env.empty())
    m.emplace_back("shared_env", troupe::to_value(shared_env));
  return m;
}

StartWorker StartWorker::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  StartWorker m;
  m.name = f.required<std::string>("name");
  m.gpus = f.optional<std::vector<int>>("gpus", {});
  m.num_gpus = f.optional<int>("num_gpus", 0);
  m.wrapper = f.optional<std::vector<std::string>>("wrapper", {});
  m.take_ports = f.optional<std::vector<int>>("take_ports", {});
  m.log_to_terminal = f.optional<bool>("log_to_terminal", true);
  m.start_timeout_ms = f.optional<int64_t>("start_timeout_ms", 60000);
  m.executable = f.optional<std::string>("executable", "");
  m.args = f.optional<std::vector<std::string>>("args", {});
  m.env = f.optional<std::map<std::string, std::string>>("env", {});
  m.shared_env_id = f.optional<std::string>("shared_env_id", "");
  m.shared_env = f.optional<std::map<std::string, std::string>>("shared_env", {});
  m.fork_server = f.optional<bool>("fork_server", false);
  m.python_fork = f.optional<bool>("python_fork", false);
  m.python_preload = f.optional<std::vector<std::string>>("python_preload", {});
  m.detached = f.optional<bool>("detached", false);
  return m;
}

Value StartWorkerReply::to_value() const {
  return Map{{"pid", pid},          {"start_time", start_time},       {"unix", unix_endpoint},
             {"tcp", tcp_endpoint}, {"gpus", troupe::to_value(gpus)}, {"log_path", log_path}};
}

StartWorkerReply StartWorkerReply::from(const Value& value) {
  FieldReader f("start_worker reply", value);
  StartWorkerReply m;
  m.pid = f.required<int64_t>("pid");
  m.start_time = f.optional<int64_t>("start_time", 0);
  m.unix_endpoint = f.required<std::string>("unix");
  m.tcp_endpoint = f.optional<std::string>("tcp", "");
  m.gpus = f.optional<std::vector<int>>("gpus", {});
  m.log_path = f.optional<std::string>("log_path", "");
  return m;
}

Map StopWorker::to_map() const { return Map{{"name", name}, {"grace_ms", grace_ms}}; }

StopWorker StopWorker::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  StopWorker m;
  m.name = f.required<std::string>("name");
  m.grace_ms = f.optional<int64_t>("grace_ms", 3000);
  return m;
}

Value StopWorkerReply::to_value() const { return Map{{"status", status}}; }

StopWorkerReply StopWorkerReply::from(const Value& value) {
  FieldReader f("stop_worker reply", value);
  return StopWorkerReply{f.required<std::string>("status")};
}

Map ReservePorts::to_map() const {
  return Map{{"owner", owner}, {"count", count}, {"lo", lo}, {"hi", hi}};
}

ReservePorts ReservePorts::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  ReservePorts m;
  m.owner = f.required<std::string>("owner");
  m.count = f.optional<int>("count", 1);
  m.lo = f.optional<int>("lo", 1400);
  m.hi = f.optional<int>("hi", 5400);
  return m;
}

namespace {

// Decodes a reply that is a bare value of type T, naming the message on a mismatch.
template <typename T>
T bare_reply(const char* message, const Value& value) {
  try {
    return value.as<T>();
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string(message) + ": " + e.message());
  }
}

}  // namespace

Value ReservePorts::reply(const std::vector<int>& ports) { return troupe::to_value(ports); }

std::vector<int> ReservePorts::reply_from(const Value& value) {
  return bare_reply<std::vector<int>>("reserve_ports reply", value);
}

Map ReleasePorts::to_map() const { return Map{{"owner", owner}}; }

ReleasePorts ReleasePorts::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  return ReleasePorts{f.required<std::string>("owner")};
}

Value ReleasePorts::reply(int64_t released) { return Value(released); }

int64_t ReleasePorts::reply_from(const Value& value) {
  return bare_reply<int64_t>("release_ports reply", value);
}

Map GpuState::to_map() const { return Map{{"gpus", troupe::to_value(gpus)}}; }

GpuState GpuState::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  return GpuState{f.optional<std::vector<int>>("gpus", {})};
}

Value GpuState::reply(const std::vector<std::string>& lines) { return troupe::to_value(lines); }

std::vector<std::string> GpuState::reply_from(const Value& value) {
  return bare_reply<std::vector<std::string>>("gpu_state reply", value);
}

Value MemoryReply::to_value() const {
  return Map{{"total_bytes", total_bytes},
             {"available_bytes", available_bytes},
             {"workers", troupe::to_value(workers)}};
}

MemoryReply MemoryReply::from(const Value& value) {
  FieldReader f("memory reply", value);
  MemoryReply m;
  m.total_bytes = f.required<int64_t>("total_bytes");
  m.available_bytes = f.required<int64_t>("available_bytes");
  m.workers = f.optional<std::map<std::string, int64_t>>("workers", {});
  return m;
}

Value WorkerExited::to_value() const {
  return Map{{"name", name},
             {"pid", pid},
             {"status", status},
             {"exit_code", troupe::to_value(exit_code)},
             {"signal", troupe::to_value(signal)},
             {"stderr_tail", troupe::to_value(stderr_tail)}};
}

WorkerExited WorkerExited::from(const Value& value) {
  FieldReader f(kEvent, value);
  WorkerExited m;
  m.name = f.required<std::string>("name");
  m.pid = f.optional<int64_t>("pid", 0);
  m.status = f.optional<std::string>("status", "exited");
  m.exit_code = f.optional<std::optional<int>>("exit_code", std::nullopt);
  m.signal = f.optional<std::optional<int>>("signal", std::nullopt);
  m.stderr_tail = f.optional<std::vector<std::string>>("stderr_tail", {});
  return m;
}

Map RegisterAgent::to_map() const {
  Map m{{"host_name", host_name},
        {"address", address},
        {"num_cpus", num_cpus},
        {"gpu_ids", troupe::to_value(gpu_ids)},
        {"labels", troupe::to_value(labels)},
        {"unix", unix_endpoint},
        {"tcp", tcp_endpoint},
        {"pid", pid},
        {"machine_id", machine_id},
        {"memory_bytes", memory_bytes},
        {"network_id", network_id}};
  if (workers) m.emplace_back("workers", troupe::to_value(*workers));
  return m;
}

RegisterAgent RegisterAgent::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  RegisterAgent m;
  m.host_name = f.required<std::string>("host_name");
  m.address = f.required<std::string>("address");
  m.num_cpus = f.optional<double>("num_cpus", 0);
  m.gpu_ids = f.optional<std::vector<int>>("gpu_ids", {});
  m.labels = f.optional<std::map<std::string, std::string>>("labels", {});
  m.unix_endpoint = f.optional<std::string>("unix", "");
  m.tcp_endpoint = f.optional<std::string>("tcp", "");
  m.pid = f.optional<int64_t>("pid", 0);
  m.machine_id = f.optional<std::string>("machine_id", "");
  m.memory_bytes = f.optional<int64_t>("memory_bytes", 0);
  m.network_id = f.optional<std::string>("network_id", "");
  m.workers = f.optional<std::optional<std::vector<std::string>>>("workers", std::nullopt);
  return m;
}

Value RegisterAgentReply::to_value() const { return Map{{"host_index", host_index}}; }

RegisterAgentReply RegisterAgentReply::from(const Value& value) {
  FieldReader f("register_agent reply", value);
  return RegisterAgentReply{f.required<int64_t>("host_index")};
}

std::string StoreReserve::reply_from(const Value& value) {
  if (!value.is_string())
    throw Error(ErrorCode::kInvalidArgument, "store_reserve reply: expected a string");
  return value.as_string();
}

StoreReserve StoreReserve::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  StoreReserve m;
  m.size = f.required<int64_t>("size");
  if (m.size < 0) throw Error(ErrorCode::kInvalidArgument, "store_reserve: negative size");
  return m;
}

Map ReadLog::to_map() const {
  return Map{
      {"name", name}, {"offset", offset}, {"tail_lines", tail_lines}, {"max_bytes", max_bytes}};
}

ReadLog ReadLog::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  ReadLog m;
  m.name = f.required<std::string>("name");
  m.offset = f.optional<int64_t>("offset", 0);
  m.tail_lines = f.optional<int64_t>("tail_lines", 0);
  m.max_bytes = f.optional<int64_t>("max_bytes", m.max_bytes);
  if (m.offset < 0)
    throw Error(ErrorCode::kInvalidArgument,
                "read_log: field 'offset': must not be negative, got " + std::to_string(m.offset));
  if (m.tail_lines < 0)
    throw Error(
        ErrorCode::kInvalidArgument,
        "read_log: field 'tail_lines': must not be negative, got " + std::to_string(m.tail_lines));
  if (m.max_bytes < 1 || m.max_bytes > kMaxBytes)
    throw Error(ErrorCode::kInvalidArgument, "read_log: field 'max_bytes': must be in 1.." +
                                                 std::to_string(kMaxBytes) + ", got " +
                                                 std::to_string(m.max_bytes));
  return m;
}

Value ReadLogReply::to_value() const {
  return Map{{"name", name},
             {"pid", pid},
             {"alive", alive},
             {"offset", offset},
             {"next_offset", next_offset},
             {"size", size},
             {"data", data}};
}

ReadLogReply ReadLogReply::from(const Value& value) {
  FieldReader f("read_log reply", value);
  ReadLogReply m;
  m.name = f.required<std::string>("name");
  m.pid = f.required<int64_t>("pid");
  m.alive = f.required<bool>("alive");
  m.offset = f.required<int64_t>("offset");
  m.next_offset = f.required<int64_t>("next_offset");
  m.size = f.required<int64_t>("size");
  m.data = f.required<std::string>("data");
  return m;
}

StorePut StorePut::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  return StorePut{f.required<Bytes>("data")};
}

StoreFree StoreFree::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  return StoreFree{f.required<std::string>("name")};
}

Value StoreUsage::to_value() const {
  return Map{{"objects", objects}, {"bytes", bytes}, {"capacity", capacity}, {"files", files}};
}

StoreUsage StoreUsage::from(const Value& value) {
  FieldReader f("store_usage reply", value);
  StoreUsage m;
  m.objects = f.required<int64_t>("objects");
  m.bytes = f.required<int64_t>("bytes");
  m.capacity = f.required<int64_t>("capacity");
  m.files = f.optional<int64_t>("files", 0);
  return m;
}

Map DumpStacks::to_map() const { return Map{{"names", troupe::to_value(names)}}; }

DumpStacks DumpStacks::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  return DumpStacks{f.optional<std::vector<std::string>>("names", {})};
}

Value WorkerStacks::to_value() const {
  return Map{{"name", name},
             {"host", host},
             {"group", group},
             {"rank", rank},
             {"pid", pid},
             {"call", call},
             {"call_ms", call_ms},
             {"calls", calls},
             {"python", python},
             {"native", native},
             {"errors", troupe::to_value(errors)}};
}

WorkerStacks WorkerStacks::from(const Value& value) {
  FieldReader f("dump_stacks reply", value);
  WorkerStacks m;
  m.name = f.required<std::string>("name");
  m.host = f.optional<std::string>("host", "");
  m.group = f.optional<std::string>("group", "");
  m.rank = f.optional<int64_t>("rank", -1);
  m.pid = f.required<int64_t>("pid");
  m.call = f.optional<std::string>("call", "");
  m.call_ms = f.optional<int64_t>("call_ms", 0);
  m.calls = f.optional<int64_t>("calls", 0);
  m.python = f.optional<std::string>("python", "");
  m.native = f.optional<std::string>("native", "");
  m.errors = f.optional<std::vector<std::string>>("errors", {});
  return m;
}

std::string WorkerStacks::describe(const std::string& shown_name) const {
  std::string out = "=== worker " + shown_name;
  if (!group.empty() || rank >= 0)
    out += " (group " + (group.empty() ? "-" : group) + ", rank " + std::to_string(rank) + ")";
  out += " on host " + host + ", pid " + std::to_string(pid) + ": ";
  if (call.empty()) {
    out += "idle";
  } else {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.1f s", static_cast<double>(call_ms) / 1000.0);
    out += "running '" + call + "' for " + seconds;
  }
  out += " (" + std::to_string(calls) + " calls so far)\n";
  auto section = [&out](const char* title, const std::string& text) {
    if (text.empty()) return;
    out += std::string("--- ") + title + " ---\n" + text;
    if (text.back() != '\n') out += "\n";
  };
  section("Python stacks", python);
  section("native stacks", native);
  for (const auto& e : errors) out += "!!! not sampled: " + e + "\n";
  return out;
}

Value DumpStacksReply::to_value() const {
  Array out;
  for (const auto& w : workers) out.push_back(w.to_value());
  return Map{{"workers", std::move(out)}};
}

DumpStacksReply DumpStacksReply::from(const Value& value) {
  FieldReader f("dump_stacks reply", value);
  DumpStacksReply m;
  for (const auto& w : f.required<Array>("workers")) m.workers.push_back(WorkerStacks::from(w));
  return m;
}

}  // namespace troupe::wire::control
