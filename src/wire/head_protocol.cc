#include "wire/head_protocol.h"

namespace troupe::wire::control {

Value HostEntry::to_value() const {
  Map m = host.to_map();
  m.emplace_back("index", index);
  m.emplace_back("alive", alive);
  m.emplace_back("registered", registered);
  return m;
}

HostEntry HostEntry::from(const Value& value) {
  FieldReader f("host entry", value);
  HostEntry e;
  e.index = f.required<int64_t>("index");
  e.alive = f.required<bool>("alive");
  e.registered = f.optional<bool>("registered", e.alive);
  e.host = RegisterAgent::from(value);
  return e;
}

Value ListHosts::reply(const std::vector<HostEntry>& hosts) {
  Array out;
  for (const auto& h : hosts) out.push_back(h.to_value());
  return out;
}

std::vector<HostEntry> ListHosts::reply_from(const Value& value) {
  if (!value.is_array())
    throw Error(ErrorCode::kInvalidArgument, "list_hosts reply: expected a list, got " +
                                                 std::string(value_type_name(value.type())));
  std::vector<HostEntry> out;
  for (const auto& v : value.as_array()) out.push_back(HostEntry::from(v));
  return out;
}

Map Reserve::to_map() const {
  Array specs;
  for (const auto& b : bundles)
    specs.push_back(Map{{"cpus", b.cpus},
                        {"gpus", b.gpus},
                        {"memory_bytes", b.memory_bytes},
                        {"labels", troupe::to_value(b.labels)},
                        {"resources", troupe::to_value(b.resources)}});
  Map m{{"group_id", group_id},
        {"bundles", std::move(specs)},
        {"strategy", strategy},
        {"only_host", only_host}};
  if (!pending_as.empty()) m.emplace_back("pending_as", pending_as);
  return m;
}

Reserve Reserve::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  Reserve m;
  m.group_id = f.required<std::string>("group_id");
  m.strategy = f.optional<std::string>("strategy", "PACK");
  m.only_host = f.optional<int64_t>("only_host", -1);
  m.pending_as = f.optional<std::string>("pending_as", "");
  for (const auto& v : f.required<Array>("bundles")) {
    FieldReader b("reserve bundle", v);
    m.bundles.push_back(BundleSpec{b.optional<double>("cpus", 1), b.optional<double>("gpus", 0),
                                   b.optional<int64_t>("memory_bytes", 0),
                                   b.optional<std::map<std::string, std::string>>("labels", {}),
                                   b.optional<std::map<std::string, double>>("resources", {})});
  }
  return m;
}

Value ReserveReply::to_value() const {
  Array out;
  for (const auto& b : bundles)
    out.push_back(Map{
        {"host", b.host}, {"gpu_ids", troupe::to_value(b.gpu_ids)}, {"gpu_share", b.gpu_share}});
  return Map{{"bundles", std::move(out)}};
}

ReserveReply ReserveReply::from(const Value& value) {
  FieldReader f("reserve reply", value);
  ReserveReply r;
  for (const auto& v : f.required<Array>("bundles")) {
    FieldReader b("reserve reply bundle", v);
    r.bundles.push_back(PlacedBundle{b.required<int64_t>("host"),
                                     b.optional<std::vector<int>>("gpu_ids", {}),
                                     b.optional<double>("gpu_share", 0)});
  }
  return r;
}

Map Restore::to_map() const {
  Map m{{"group_id", group_id},
        {"bundles",
         Value(Reserve{group_id, bundles, "PACK", -1, ""}.to_map()).find("bundles")->as_array()},
        {"placed", ReserveReply{placed}.to_value().find("bundles")->as_array()}};
  if (overcommit) m.emplace_back("overcommit", true);
  return m;
}

Restore Restore::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  Restore m;
  Reserve specs = Reserve::from(Map{{"group_id", f.required<std::string>("group_id")},
                                    {"bundles", f.required<Array>("bundles")}});
  m.group_id = std::move(specs.group_id);
  m.bundles = std::move(specs.bundles);
  m.placed = ReserveReply::from(Map{{"bundles", f.required<Array>("placed")}}).bundles;
  m.overcommit = f.optional<bool>("overcommit", false);
  if (m.placed.size() != m.bundles.size())
    throw Error(ErrorCode::kProtocol, std::string(kMethod) + ": " +
                                          std::to_string(m.bundles.size()) + " bundles but " +
                                          std::to_string(m.placed.size()) + " placements");
  return m;
}

Map Release::to_map() const { return Map{{"group_id", group_id}}; }

Release Release::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  return Release{f.required<std::string>("group_id")};
}

Value HostResources::to_value() const {
  return Map{{"index", index},
             {"name", name},
             {"alive", alive},
             {"cpus", cpus},
             {"cpus_free", cpus_free},
             {"gpu_ids", troupe::to_value(gpu_ids)},
             {"gpus_free", troupe::to_value(gpus_free)},
             {"memory_bytes", memory_bytes},
             {"memory_free", memory_free},
             {"resources", troupe::to_value(resources)},
             {"resources_free", troupe::to_value(resources_free)}};
}

HostResources HostResources::from(const Value& value) {
  FieldReader f("host resources", value);
  HostResources h;
  h.index = f.required<int64_t>("index");
  h.name = f.required<std::string>("name");
  h.alive = f.optional<bool>("alive", false);
  h.cpus = f.optional<double>("cpus", 0);
  h.cpus_free = f.optional<double>("cpus_free", 0);
  h.gpu_ids = f.optional<std::vector<int>>("gpu_ids", {});
  h.gpus_free = f.optional<std::vector<double>>("gpus_free", {});
  if (h.gpus_free.size() != h.gpu_ids.size())
    throw Error(ErrorCode::kProtocol, "host resources: " + std::to_string(h.gpu_ids.size()) +
                                          " GPU ids but " + std::to_string(h.gpus_free.size()) +
                                          " free shares");
  h.memory_bytes = f.optional<int64_t>("memory_bytes", 0);
  h.memory_free = f.optional<int64_t>("memory_free", 0);
  h.resources = f.optional<std::map<std::string, double>>("resources", {});
  h.resources_free = f.optional<std::map<std::string, double>>("resources_free", {});
  return h;
}

Value Resources::reply(const std::vector<HostResources>& hosts) {
  Array out;
  for (const auto& h : hosts) out.push_back(h.to_value());
  return out;
}

std::vector<HostResources> Resources::reply_from(const Value& value) {
  if (!value.is_array())
    throw Error(ErrorCode::kInvalidArgument, "resources reply: expected a list, got " +
                                                 std::string(value_type_name(value.type())));
  std::vector<HostResources> out;
  for (const auto& v : value.as_array()) out.push_back(HostResources::from(v));
  return out;
}

Map TieBooking::to_map() const {
  return Map{{"group_id", group_id}, {"host", host}, {"worker", worker}};
}

TieBooking TieBooking::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  return TieBooking{f.required<std::string>("group_id"), f.required<int64_t>("host"),
                    f.required<std::string>("worker")};
}

Value HostLost::to_value() const {
  return Map{{"index", index}, {"name", name}, {"reason", reason}};
}

HostLost HostLost::from(const Value& value) {
  FieldReader f(kEvent, value);
  return HostLost{f.required<int64_t>("index"), f.required<std::string>("name"),
                  f.optional<std::string>("reason", "")};
}

Value WorkerLog::to_value() const {
  return Map{
      {"name", name}, {"pid", pid}, {"stderr", is_stderr}, {"lines", troupe::to_value(lines)}};
}

WorkerLog WorkerLog::from(const Value& value) {
  FieldReader f(kEvent, value);
  WorkerLog m;
  m.name = f.required<std::string>("name");
  m.pid = f.optional<int64_t>("pid", 0);
  m.is_stderr = f.optional<bool>("stderr", false);
  m.lines = f.required<std::vector<std::string>>("lines");
  return m;
}

namespace {

std::string bounded(const FieldReader& f, const char* message, const char* key, size_t limit,
                    bool required) {
  std::string v = required ? f.required<std::string>(key) : f.optional<std::string>(key, "");
  if (v.size() > limit)
    throw Error(ErrorCode::kInvalidArgument, std::string(message) + ": field '" + key + "' is " +
                                                 std::to_string(v.size()) + " bytes, more than " +
                                                 std::to_string(limit));
  return v;
}

}  // namespace

Value NamedWorkerRecord::to_value() const {
  return Map{{"ns", ns},         {"name", name},        {"detached", detached}, {"host", host},
             {"worker", worker}, {"tcp", tcp_endpoint}, {"pid", pid},           {"info", info}};
}

NamedWorkerRecord NamedWorkerRecord::from(const Value& value) {
  const char* what = "named worker record";
  FieldReader f(what, value);
  NamedWorkerRecord r;
  r.ns = bounded(f, what, "ns", kMaxField, false);
  r.name = bounded(f, what, "name", kMaxField, true);
  if (r.name.empty())
    throw Error(ErrorCode::kInvalidArgument, "named worker record: the name is empty");
  r.detached = f.optional<bool>("detached", false);
  r.host = bounded(f, what, "host", kMaxField, false);
  r.worker = bounded(f, what, "worker", kMaxField, false);
  r.tcp_endpoint = bounded(f, what, "tcp", kMaxField, false);
  r.pid = f.optional<int64_t>("pid", 0);
  r.info = bounded(f, what, "info", kMaxInfo, false);
  return r;
}

Map NameRegister::to_map() const { return Map{{"record", record.to_value()}, {"update", update}}; }

NameRegister NameRegister::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  NameRegister m;
  m.record = NamedWorkerRecord::from(f.required<Value>("record"));
  m.update = f.optional<bool>("update", false);
  return m;
}

Value NameRegisterReply::to_value() const {
  return Map{{"registered", registered}, {"existing", registered ? Value() : existing.to_value()}};
}

NameRegisterReply NameRegisterReply::from(const Value& value) {
  FieldReader f("name_register reply", value);
  NameRegisterReply m;
  m.registered = f.required<bool>("registered");
  if (!m.registered) m.existing = NamedWorkerRecord::from(f.required<Value>("existing"));
  return m;
}

NameKey NameKey::from(const char* method, const Value& kwargs) {
  FieldReader f(method, kwargs);
  NameKey k;
  k.ns = bounded(f, method, "ns", NamedWorkerRecord::kMaxField, false);
  k.name = bounded(f, method, "name", NamedWorkerRecord::kMaxField, true);
  if (k.name.empty())
    throw Error(ErrorCode::kInvalidArgument, std::string(method) + ": the name is empty");
  if (const Value* w = kwargs.find("worker"); w && !w->is_nil())
    k.worker = bounded(f, method, "worker", NamedWorkerRecord::kMaxField, true);
  return k;
}

Value NameList::reply(const std::vector<Entry>& entries) {
  Array out;
  for (const auto& e : entries) {
    Value v = e.record.to_value();
    v.as_map().emplace_back("owner", e.owner);
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<NameList::Entry> NameList::reply_from(const Value& value) {
  if (!value.is_array())
    throw Error(ErrorCode::kInvalidArgument, "name_list reply: expected a list, got " +
                                                 std::string(value_type_name(value.type())));
  std::vector<Entry> out;
  for (const auto& v : value.as_array()) {
    FieldReader f("name_list entry", v);
    out.push_back(Entry{NamedWorkerRecord::from(v), f.optional<std::string>("owner", "")});
  }
  return out;
}

}  // namespace troupe::wire::control
