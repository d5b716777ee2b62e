// Every head-protocol message (wire/head_protocol.h) survives the trip through a real request,
// response or event frame, optional fields take their documented defaults, and decoding bad
// input names the message and the field.
#include "wire/head_protocol.h"

#include <gtest/gtest.h>

#include "wire/wire_test_util.h"

namespace troupe::wire::control {
namespace {

using codec_test::error_of;
using codec_test::through_request;
using codec_test::through_response;

HostEntry sample_host(int64_t index, bool alive) {
  HostEntry e;
  e.index = index;
  e.alive = alive;
  e.registered = true;
  e.host.host_name = "host-" + std::to_string(index);
  e.host.address = "10.77.0." + std::to_string(index + 2);
  e.host.num_cpus = 8;
  e.host.gpu_ids = {0, 1};
  e.host.labels = {{"topology", "rack-" + std::to_string(index)}};
  e.host.unix_endpoint = "unix:/run/agent-" + std::to_string(index) + ".sock";
  e.host.tcp_endpoint = "tcp:10.77.0.2:4100";
  e.host.pid = 1000 + index;
  e.host.machine_id = "boot-" + std::to_string(index);
  e.host.memory_bytes = int64_t{64} << 30;
  e.host.network_id = "net-" + std::to_string(index);
  return e;
}

TEST(HeadProtocol, ListHostsReplyRoundTrips) {
  // Host ids are the head's: an entry keeps its index whatever its position in the list.
  std::vector<HostEntry> hosts = {sample_host(1, true), sample_host(0, false)};
  hosts[1].registered = false;
  std::vector<HostEntry> back = ListHosts::reply_from(through_response(ListHosts::reply(hosts)));
  EXPECT_EQ(back, hosts);
  EXPECT_TRUE(ListHosts::reply_from(through_response(ListHosts::reply({}))).empty());
}

TEST(HeadProtocol, HostEntryRegisteredDefaultsToAlive) {
  // An older head sends no "registered": a live host is a registered one.
  Map m = sample_host(0, true).host.to_map();
  m.emplace_back("index", 0);
  m.emplace_back("alive", true);
  EXPECT_TRUE(HostEntry::from(m).registered);
  Map lost = sample_host(0, false).host.to_map();
  lost.emplace_back("index", 0);
  lost.emplace_back("alive", false);
  EXPECT_FALSE(HostEntry::from(lost).registered);
}

TEST(HeadProtocol, ReserveRoundTrips) {
  Reserve r;
  r.group_id = "d1.vc-0-pg0";
  r.bundles = {BundleSpec{2, 0.5, int64_t{1} << 30, {{"zone", "a"}}, {{"tag", 1.5}}},
               BundleSpec{1, 1, 0, {}, {}}};
  r.strategy = "STRICT_SPREAD";
  r.only_host = 3;
  r.pending_as = "placement group trainer";
  EXPECT_EQ(Reserve::from(through_request(r)), r);
  // Defaults: PACK on any host; a bundle with no fields is 1 CPU and nothing else.
  Reserve d = Reserve::from(Map{{"group_id", "g"}, {"bundles", Array{Map{}}}});
  EXPECT_EQ(d.strategy, "PACK");
  EXPECT_EQ(d.only_host, -1);
  EXPECT_EQ(d.pending_as, "");  // not waiting
  ASSERT_EQ(d.bundles.size(), 1u);
  EXPECT_EQ(d.bundles[0], (BundleSpec{1, 0, 0, {}, {}}));
  // A named amount that is not a number is an error naming the field.
  try {
    Reserve::from(
        Map{{"group_id", "g"}, {"bundles", Array{Map{{"resources", Map{{"tag", "two"}}}}}}});
    ADD_FAILURE() << "a resource amount \"two\" was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("resources"), std::string::npos) << e.message();
  }
}

TEST(HeadProtocol, ReserveReplyRoundTrips) {
  ReserveReply r{{PlacedBundle{1, {0}, 0.5}, PlacedBundle{0, {}, 0}, PlacedBundle{1, {0, 1}, 1}}};
  EXPECT_EQ(ReserveReply::from(through_response(r.to_value())), r);
  EXPECT_EQ(ReserveReply::from(through_response(ReserveReply{}.to_value())), ReserveReply{});
}

TEST(HeadProtocol, RestoreRoundTrips) {
  Restore r{"d1.vc-0-pg1",
            {BundleSpec{2, 0.5, int64_t{1} << 30, {{"zone", "a"}}, {{"tag", 1}}},
             BundleSpec{1, 0, 0, {}, {}}},
            {PlacedBundle{1, {0}, 0.5}, PlacedBundle{0, {}, 0}},
            false};
  EXPECT_EQ(Restore::from(through_request(r)), r);
  Restore over = r;
  over.overcommit = true;
  EXPECT_EQ(Restore::from(through_request(over)), over);
  // Every bundle needs its placement.
  Map m = r.to_map();
  m.back().second = Array{};
  try {
    Restore::from(m);
    ADD_FAILURE() << "a restore with 2 bundles and no placement was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
    EXPECT_EQ(e.message(), "restore: 2 bundles but 0 placements");
  }
}

TEST(HeadProtocol, ResourcesReplyRoundTrips) {
  HostResources a{0,
                  "node-a",
                  true,
                  4,
                  2.5,
                  {0, 1},
                  {1, 0.5},
                  int64_t{8} << 30,
                  1024,
                  {{"tag", 2}, {"node:127.0.0.9", 1}},
                  {{"tag", 0.5}, {"node:127.0.0.9", 1}}};
  HostResources b{1, "node-b", false, 2, 2, {}, {}, 0, 0, {}, {}};
  EXPECT_EQ(Resources::reply_from(through_response(Resources::reply({a, b}))),
            (std::vector<HostResources>{a, b}));
  // One free share per GPU id.
  Value bad = a.to_value();
  for (auto& [k, v] : bad.as_map())
    if (k == "gpus_free") v = troupe::to_value(std::vector<double>{1});
  try {
    HostResources::from(bad);
    ADD_FAILURE() << "2 GPU ids with 1 free share were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "host resources: 2 GPU ids but 1 free shares");
  }
}

TEST(HeadProtocol, TieBookingAndNameListRoundTrip) {
  TieBooking t{"ray-pg-1", 2, "d1.ray-service"};
  EXPECT_EQ(TieBooking::from(through_request(t)), t);
  NamedWorkerRecord r{
      "svc", "gpu-service", true, "node-a", "d1.ray-service", "tcp:10.0.0.2:4000", 42, ""};
  std::vector<NameList::Entry> entries{{r, ""}, {r, "driver at tcp:10.0.0.1:5000"}};
  entries[1].record.name = "other";
  EXPECT_EQ(NameList::reply_from(through_response(NameList::reply(entries))), entries);
}

TEST(HeadProtocol, ReleaseRoundTrips) {
  EXPECT_EQ(Release::from(through_request(Release{"d1.vc-0-pg0"})), Release{"d1.vc-0-pg0"});
}

TEST(HeadProtocol, EventsRoundTrip) {
  HostLost lost{2, "host-2", "no heartbeat for 800 ms"};
  EXPECT_EQ(HostLost::from(through_response(lost.to_value())), lost);
  EXPECT_EQ(HostLost::from(Map{{"index", 1}, {"name", "host-1"}}).reason, "");
  WorkerLog log{"d1.policy-0", 4242, true, {"line one", "", "line three"}};
  EXPECT_EQ(WorkerLog::from(through_response(log.to_value())), log);
  WorkerLog out = WorkerLog::from(Map{{"name", "w"}, {"lines", Array{"x"}}});
  EXPECT_EQ(out.pid, 0);
  EXPECT_FALSE(out.is_stderr);
}

TEST(HeadProtocol, MethodAndEventNamesAreTheOnesTheHeadServes) {
  EXPECT_STREQ(ListHosts::kMethod, "list_hosts");
  EXPECT_STREQ(Reserve::kMethod, "reserve");
  EXPECT_STREQ(Release::kMethod, "release");
  EXPECT_STREQ(DescribeFree::kMethod, "describe_free");
  EXPECT_STREQ(HostLost::kEvent, "host_lost");
  EXPECT_STREQ(WorkerLog::kEvent, "worker_log");
}

TEST(HeadProtocol, BadInputNamesTheMessageAndTheField) {
  EXPECT_EQ(error_of([] {
              Reserve::from(Map{{"bundles", Array{}}});
            }),
            "reserve: field 'group_id' is missing");
  EXPECT_EQ(error_of([] {
              Reserve::from(Map{{"group_id", "g"}});
            }),
            "reserve: field 'bundles' is missing");
  EXPECT_EQ(error_of([] {
              Reserve::from(Map{{"group_id", "g"}, {"bundles", "two"}});
            }),
            "reserve: field 'bundles': expected list<any>, got string \"two\"");
  EXPECT_EQ(error_of([] {
              Reserve::from(Map{{"group_id", "g"}, {"bundles", Array{Map{{"gpus", "one"}}}}});
            }),
            "reserve bundle: field 'gpus': expected float, got string \"one\"");
  EXPECT_EQ(error_of([] {
              Reserve::from(Map{{"group_id", "g"}, {"bundles", Array{7}}});
            }),
            "reserve bundle: expected a map of fields, got int");
  EXPECT_EQ(error_of([] {
              Reserve::from(Map{{"group_id", "g"}, {"bundles", Array{}}, {"only_host", "h1"}});
            }),
            "reserve: field 'only_host': expected int, got string \"h1\"");
  EXPECT_EQ(error_of([] { ReserveReply::from(Map{}); }),
            "reserve reply: field 'bundles' is missing");
  EXPECT_EQ(error_of([] {
              ReserveReply::from(Map{{"bundles", Array{Map{{"gpu_ids", Array{}}}}}});
            }),
            "reserve reply bundle: field 'host' is missing");
  EXPECT_EQ(error_of([] { Release::from(Map{}); }), "release: field 'group_id' is missing");
  EXPECT_EQ(error_of([] { Release::from(Value(Array{})); }),
            "release: expected a map of fields, got list");
  EXPECT_EQ(error_of([] { ListHosts::reply_from(Value(Map{})); }),
            "list_hosts reply: expected a list, got map");
  EXPECT_EQ(error_of([] {
              ListHosts::reply_from(Value(Array{Map{{"alive", true}}}));
            }),
            "host entry: field 'index' is missing");
  EXPECT_EQ(error_of([] {
              ListHosts::reply_from(Value(Array{Map{{"index", 0}}}));
            }),
            "host entry: field 'alive' is missing");
  // A host entry is a registration plus the head's fields: its registration fields are checked
  // as register_agent's.
  EXPECT_EQ(error_of([] {
              HostEntry::from(Map{{"index", 0}, {"alive", true}, {"address", "10.0.0.1"}});
            }),
            "register_agent: field 'host_name' is missing");
  EXPECT_EQ(error_of([] {
              HostLost::from(Map{{"index", 1}});
            }),
            "host_lost: field 'name' is missing");
  EXPECT_EQ(error_of([] {
              HostLost::from(Map{{"index", "1"}, {"name", "h"}});
            }),
            "host_lost: field 'index': expected int, got string \"1\"");
  EXPECT_EQ(error_of([] {
              WorkerLog::from(Map{{"name", "w"}});
            }),
            "worker_log: field 'lines' is missing");
  EXPECT_EQ(error_of([] {
              WorkerLog::from(Map{{"name", "w"}, {"lines", Array{1}}});
            }),
            "worker_log: field 'lines': expected string, got int 1");
}

TEST(HeadProtocol, NamedWorkerMessagesRoundTrip) {
  NamedWorkerRecord r{"ns",     "counter",           true,
                      "node-a", "ab12.ray-counter",  "tcp:10.0.0.2:4100",
                      4242,     R"({"methods": {}})"};
  NameRegister m{r, true};
  EXPECT_EQ(NameRegister::from(through_request(m)), m);
  NameRegisterReply taken{false, r};
  EXPECT_EQ(NameRegisterReply::from(through_response(taken.to_value())), taken);
  NameRegisterReply ok{true, {}};
  EXPECT_EQ(NameRegisterReply::from(through_response(ok.to_value())), ok);
  NameKey k{"ns", "counter", "ab12.ray-counter"};
  EXPECT_EQ(NameKey::from(NameKey::kLookup, through_response(Value(k.to_map()))), k);
  // Only the name is required; the rest default to empty, not detached, pid 0.
  NamedWorkerRecord bare = NamedWorkerRecord::from(Map{{"name", "x"}});
  EXPECT_EQ(bare, (NamedWorkerRecord{"", "x", false, "", "", "", 0, ""}));
  EXPECT_NE(error_of([] {
              NamedWorkerRecord::from(Map{{"name", "x"}, {"pid", "7"}});
            }).find("field 'pid'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              NamedWorkerRecord::from(
                  Map{{"name", "x"}, {"info", std::string(NamedWorkerRecord::kMaxInfo + 1, 'i')}});
            }).find("field 'info' is 1048577 bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace troupe::wire::control
