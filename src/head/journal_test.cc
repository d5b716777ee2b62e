// The head's journal (head/journal.h) and a head started again on it (Head::set_journal): what
// was booked is booked again as its hosts register, a tied booking stays with its worker, one
// that no driver books again is released after the grace, one a driver books again is that
// driver's; a torn last line is skipped; the file is compacted.
#include "head/journal.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <set>

#include "head/head.h"
#include "head_peer.h"
#include "test_util.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "wire/control.h"
#include "wire/head_protocol.h"

namespace troupe::head {
namespace {

namespace control = wire::control;
using namespace std::chrono_literals;

const std::string kJournalToken = "journal-test-token";

// A directory of this test's, removed with what it holds.
struct JournalDir {
  JournalDir() {
    std::string t = ::testing::TempDir() + "troupe-journal-XXXXXX";
    path_ = ::mkdtemp(t.data());
  }
  ~JournalDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string path_;
};

Journal::Booking two_gpus_on(const std::string& host) {
  Journal::Booking b;
  b.bundles = {BundleRequest{1, 1, 0, {}, {}}, BundleRequest{1, 1, 0, {}, {{"tag", 1}}}};
  b.hosts = {host, host};
  b.placements = {BundlePlacement{0, {0}, 1.0}, BundlePlacement{0, {1}, 1.0}};
  return b;
}

size_t lines_of(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(Journal, ReadsBackWhatWasBookedTiedAndFreed) {
  JournalDir dir;
  const std::string path = dir.path() + "/head.journal";
  {
    Journal j(path);
    EXPECT_TRUE(j.recovered().empty());
    j.book("a", two_gpus_on("node-a"));
    j.book("b", two_gpus_on("node-b"));
    j.tie("b", "node-b", "d.ray-service");
    j.book("c", two_gpus_on("node-a"));
    j.free("c");
    j.free("never-booked");  // nothing to record
  }                          // as a killed head leaves it: no goodbye record
  EXPECT_EQ(lines_of(path), 5u);
  {
    std::ofstream torn(path, std::ios::app);
    torn << R"({"op":"book","id":"torn","bund)";  // a head killed inside a write
  }
  Journal again(path);
  ASSERT_EQ(again.recovered().size(), 2u);
  const auto& a = again.recovered().at("a");
  EXPECT_EQ(a.hosts, (std::vector<std::string>{"node-a", "node-a"}));
  EXPECT_EQ(a.placements[1].gpu_ids, (std::vector<int>{1}));
  EXPECT_EQ(a.bundles[1].resources.at("tag"), 1);
  EXPECT_TRUE(a.tied_worker.empty());
  EXPECT_EQ(again.recovered().at("b").tied_worker, "d.ray-service");
  EXPECT_EQ(again.recovered().at("b").tied_host, "node-b");
  EXPECT_EQ(lines_of(path), 2u);  // rewritten with the live bookings only
}

control::NamedWorkerRecord named(const std::string& name, const std::string& worker,
                                 bool detached) {
  return control::NamedWorkerRecord{"ns",     name,
                                    detached, "node-a",
                                    worker,   "tcp:127.0.0.9:7000",
                                    4242,     std::string("info\0\xff\x01", 7)};
}

TEST(Journal, ReadsBackNamedRecordsAsLastWritten) {
  JournalDir dir;
  const std::string path = dir.path() + "/head.journal";
  {
    Journal j(path);
    EXPECT_TRUE(j.recovered_names().empty());
    j.name(named("kept", "", true));
    j.name(named("kept", "d.w0", true));  // filled in once started: replaces it
    j.name(named("gone", "d.w1", false));
    j.unname("ns", "gone");
    j.unname("ns", "never-named");  // nothing to record
    j.book("a", two_gpus_on("node-a"));
  }
  EXPECT_EQ(lines_of(path), 5u);
  {
    std::ofstream torn(path, std::ios::app);
    torn << R"({"op":"name","ns":"ns","name":"torn","deta)";
  }
  Journal again(path);
  ASSERT_EQ(again.recovered_names().size(), 1u);
  // Every field as written, the opaque info's bytes (not UTF-8) too.
  EXPECT_EQ(again.recovered_names().at({"ns", "kept"}), named("kept", "d.w0", true));
  EXPECT_EQ(again.recovered().size(), 1u);
  EXPECT_EQ(lines_of(path), 2u);  // rewritten with the live booking and name only
  Journal third(path);
  EXPECT_EQ(third.recovered_names().at({"ns", "kept"}).info, std::string("info\0\xff\x01", 7));
}

TEST(Journal, IsCompactedWhenMostOfItIsFreedRecords) {
  JournalDir dir;
  const std::string path = dir.path() + "/head.journal";
  Journal j(path);
  j.book("kept", two_gpus_on("node-a"));
  for (int i = 0; i < 3000; ++i) {
    j.book("g" + std::to_string(i), two_gpus_on("node-a"));
    j.free("g" + std::to_string(i));
  }
  EXPECT_LT(lines_of(path), 1100u);  // not 6,001
  Journal again(path);
  ASSERT_EQ(again.recovered().size(), 1u);
  EXPECT_EQ(again.recovered().count("kept"), 1u);
}

class RestartedHead : public ::testing::Test {
 protected:
  std::shared_ptr<transport::RpcPeer> connect(Head& head) {
    auto peer = troupe_test::connect_peer(loop_, head.endpoint(), kJournalToken);
    peers_.push_back(peer);
    return peer;
  }
  void register_host(Head& head, const std::string& name,
                     std::optional<std::vector<std::string>> workers = std::nullopt) {
    control::RegisterAgent reg;
    reg.workers = std::move(workers);
    reg.host_name = name;
    reg.address = "127.0.0.9";
    reg.num_cpus = 4;
    reg.gpu_ids = {0, 1};
    reg.labels = {{"resource:tag", "2"}};
    connect(head)->call(control::RegisterAgent::kMethod, reg.to_map()).get(5000ms);
  }
  void close_all(Head& head) {
    for (auto& p : peers_) p->close(Error(ErrorCode::kShutdown, "test over"));
    peers_.clear();
    loop_.run_sync([] {});
    head.close();
    loop_.run_sync([] {});
  }
  static std::set<std::string> groups_of(const Head& head) {
    std::set<std::string> out;
    for (const auto& [id, where] : head.placement_groups()) out.insert(id);
    return out;
  }

  JournalDir dir_;
  transport::IoLoop loop_;
  std::vector<std::shared_ptr<transport::RpcPeer>> peers_;
};

TEST_F(RestartedHead, BooksAgainWhatWasBookedAndReleasesWhatNoDriverClaims) {
  const std::string journal = dir_.path() + "/head.journal";
  {
    Head first(loop_.context(), "tcp:127.0.0.1:0", kJournalToken);
    first.set_journal(journal, 60000ms);
    register_host(first, "node-a");
    auto driver = connect(first);
    for (const char* id : {"plain", "claimed", "tied"}) {
      control::Reserve m;
      m.group_id = id;
      m.bundles = {control::BundleSpec{1, 0, 0, {}, {{"tag", 0.5}}}};
      driver->call(control::Reserve::kMethod, m.to_map()).get(5000ms);
    }
    driver
        ->call(control::TieBooking::kMethod,
               control::TieBooking{"tied", 0, "d.ray-service"}.to_map())
        .get(5000ms);
    // A clean close frees (and journals) them all: the driver's two as it leaves, "tied" as its
    // host's agent leaves. A head killed with -9 hears neither: its journal holds all three.
    close_all(first);
  }
  {
    Journal j(journal);
    EXPECT_TRUE(j.recovered().empty());
    for (const char* id : {"plain", "claimed", "tied"}) {
      Journal::Booking b;
      b.bundles = {BundleRequest{1, 0, 0, {}, {{"tag", 0.5}}}};
      b.hosts = {"node-a"};
      b.placements = {BundlePlacement{0, {}, 0}};
      j.book(id, b);
    }
    j.tie("tied", "node-a", "d.ray-service");
  }

  Head second(loop_.context(), "tcp:127.0.0.1:0", kJournalToken);
  second.set_journal(journal, 300ms);
  EXPECT_TRUE(groups_of(second).empty());  // nothing until their host registers
  register_host(second, "node-a");
  EXPECT_EQ(groups_of(second), (std::set<std::string>{"claimed", "plain", "tied"}));
  auto status = second.placement_status();
  bool tied_listed = false;
  for (const auto& g : status[0].second.as_array())
    if (*g.find("id") == Value("tied"))
      tied_listed = *g.find("held_by") == Value("worker d.ray-service on node-a");
  EXPECT_TRUE(tied_listed);
  // The tag is booked (0.5 x 3 of 2): nothing new takes it meanwhile.
  auto other = connect(second);
  control::Reserve greedy;
  greedy.group_id = "greedy";
  greedy.bundles = {control::BundleSpec{0, 0, 0, {}, {{"tag", 1}}}};
  EXPECT_THROW(other->call(control::Reserve::kMethod, greedy.to_map()).get(5000ms), Error);

  // A driver books "claimed" again (as a reconnecting driver does); "plain" is nobody's.
  control::Restore claim{
      "claimed", {control::BundleSpec{1, 0, 0, {}, {{"tag", 0.5}}}}, {{0, {}, 0}}, false};
  other->call(control::Restore::kMethod, claim.to_map()).get(5000ms);
  EXPECT_TRUE(eventually(
      [&] {
        return groups_of(second) == std::set<std::string>{"claimed", "tied"};
      },
      5000ms))
      << "the unclaimed group was not released after the grace";
  close_all(second);
}

Value lookup(const std::shared_ptr<transport::RpcPeer>& peer, const std::string& name) {
  return peer->call(control::NameKey::kLookup, control::NameKey{"ns", name, std::nullopt}.to_map())
      .get(5000ms);
}

// The named records of a head killed with -9 (its journal as that head left it) are the next
// head's registry at once; as the host's agent registers, listing the workers it runs, the
// records and tied bookings of the workers it does not list go, the others stay, and nothing
// else can take their names.
TEST_F(RestartedHead, FindsNamedWorkersAgainAndForgetsThoseThatDiedMeanwhile) {
  const std::string journal = dir_.path() + "/head.journal";
  {
    Journal j(journal);
    j.name(named("alive", "d.w0", true));
    j.name(named("plain", "d.w1", false));
    j.name(named("died", "d.w2", true));
    j.name(named("starting", "", false));  // its driver was starting it
    Journal::Booking b;
    b.bundles = {BundleRequest{1, 0, 0, {}, {}}};
    b.hosts = {"node-a"};
    b.placements = {BundlePlacement{0, {}, 0}};
    j.book("of-alive", b);
    j.tie("of-alive", "node-a", "d.w0");
    j.book("of-died", b);
    j.tie("of-died", "node-a", "d.w2");
  }
  Head second(loop_.context(), "tcp:127.0.0.1:0", kJournalToken);
  second.set_journal(journal, 60000ms);
  auto driver = connect(second);
  // Before its host registers: found by name (the worker is not known dead yet).
  EXPECT_FALSE(lookup(driver, "alive").is_nil());
  EXPECT_FALSE(lookup(driver, "died").is_nil());
  EXPECT_TRUE(lookup(driver, "starting").is_nil());
  // Another driver cannot take a recovered name.
  control::NameRegister steal{named("alive", "d.other", false), false};
  auto reply = control::NameRegisterReply::from(
      driver->call(control::NameRegister::kMethod, steal.to_map()).get(5000ms));
  EXPECT_FALSE(reply.registered);
  EXPECT_EQ(reply.existing.worker, "d.w0");

  register_host(second, "node-a", std::vector<std::string>{"d.w0", "d.w1", "d.unnamed"});
  EXPECT_EQ(control::NamedWorkerRecord::from(lookup(driver, "alive")),
            named("alive", "d.w0", true));
  EXPECT_FALSE(lookup(driver, "plain").is_nil());
  EXPECT_TRUE(lookup(driver, "died").is_nil());
  EXPECT_EQ(groups_of(second), (std::set<std::string>{"of-alive"}));
  std::set<std::string> listed;
  for (const auto& e : second.name_list()) {
    listed.insert(e.record.name);
    EXPECT_EQ(e.owner, "");  // held by no driver connection
  }
  EXPECT_EQ(listed, (std::set<std::string>{"alive", "plain"}));
  // What the journal says now (read from a copy: opening it rewrites it): the two names.
  std::filesystem::copy_file(journal, journal + ".copy");
  Journal after(journal + ".copy");
  EXPECT_EQ(after.recovered_names().size(), 2u);
  EXPECT_EQ(after.recovered_names().count({"ns", "died"}), 0u);
  EXPECT_EQ(after.recovered().size(), 1u);
  close_all(second);
}

}  // namespace
}  // namespace troupe::head
