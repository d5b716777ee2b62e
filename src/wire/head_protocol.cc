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
                        {"labels", troupe::to_value(b.labels)}});
  return Map{{"group_id", group_id},
             {"bundles", std::move(specs)},
             {"strategy", strategy},
             {"only_host", only_host}};
}

Reserve Reserve::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  Reserve m;
  m.group_id = f.required<std::string>("group_id");
  m.strategy = f.optional<std::string>("strategy", "PACK");
  m.only_host = f.optional<int64_t>("only_host", -1);
  for (const auto& v : f.required<Array>("bundles")) {
    FieldReader b("reserve bundle", v);
    m.bundles.push_back(BundleSpec{b.optional<double>("cpus", 1), b.optional<double>("gpus", 0),
                                   b.optional<int64_t>("memory_bytes", 0),
                                   b.optional<std::map<std::string, std::string>>("labels", {})});
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
  return Map{{"group_id", group_id},
             {"bundles", Value(Reserve{group_id, bundles}.to_map()).find("bundles")->as_array()},
             {"placed", ReserveReply{placed}.to_value().find("bundles")->as_array()}};
}

Restore Restore::from(const Value& kwargs) {
  FieldReader f(kMethod, kwargs);
  Restore m;
  Reserve specs = Reserve::from(Map{{"group_id", f.required<std::string>("group_id")},
                                    {"bundles", f.required<Array>("bundles")}});
  m.group_id = std::move(specs.group_id);
  m.bundles = std::move(specs.bundles);
  m.placed = ReserveReply::from(Map{{"bundles", f.required<Array>("placed")}}).bundles;
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

}  // namespace troupe::wire::control
