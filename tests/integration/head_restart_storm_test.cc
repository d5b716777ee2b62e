// kill -9 of the head in the middle of storms, on a real standing cluster (`troupe start --head`
// and one agent on loopback, --block, children of the test), the head started again on its
// directory (its journal) while the storm goes on:
// - a placement-group storm (a thread booking and unbooking small groups as fast as it can):
//   once it is over, the head books exactly the groups the driver holds, each once: nothing
//   booked twice, nothing lost (the host's free CPUs are its CPUs less the held ones);
// - a named-worker storm (a thread starting workers, which needs no head, registering their
//   names, which does, and stopping the oldest): every name the head holds then points at a live
//   worker of the storm, and every live worker whose name the driver registered is found by it.
// An operation that fails while the head is away is in doubt (the head may have done it before
// it died): the storm goes on without it, and the head must settle it by itself.
#include <signal.h>

#include <atomic>
#include <deque>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/failure_classes.h"
#include "integration/standing_cluster.h"
#include "integration/test_classes.h"
#include "test_util.h"
#include "troupe/resources.h"
#include "troupe/troupe.h"

namespace troupe_failure {
namespace {

using troupe::Cluster;
using troupe::ClusterOptions;
using troupe::NamedWorker;
using troupe::Worker;
using troupe_test::calculator;
using namespace std::chrono_literals;

constexpr double kHostCpus = 4;
constexpr double kGroupCpus = 0.125;  // exact in binary: sums of it compare exactly
constexpr size_t kMaxHeld = 16;       // 2 CPUs at most: a booking always fits

class HeadRestartStorm : public testing::Test {
 protected:
  HeadRestartStorm() {
    envs_.set("TMPDIR", dir_.path());
    envs_.set("TROUPE_TOKEN", "head-restart-storm-test-token");
    if (!cluster_.start_head()) return;
    envs_.set("TROUPE_ADDRESS", cluster_.address());
    cluster_.start_agents({{"storm-a", "127.0.0.54", "4", "0"}});
  }
  static ClusterOptions driver() {
    ClusterOptions o;  // TROUPE_ADDRESS: the standing head
    o.log_to_driver = false;
    return o;
  }
  // The ids `troupe status` lists under "placement groups:".
  std::set<std::string> groups_in_status() {
    std::istringstream in(cluster_.status().output);
    std::set<std::string> out;
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
      if (line == "placement groups:") {
        inside = true;
      } else if (inside && line.rfind("  ", 0) == 0 && line != "  (none)") {
        std::istringstream words(line);
        std::string id;
        words >> id;
        out.insert(id);
      } else if (inside) {
        inside = false;
      }
    }
    return out;
  }
  // Runs `storm` on a thread; kills the head and starts it again once `done` has counted 50
  // operations, and stops the storm once 50 more succeeded after the restart.
  void kill_head_amid(const std::function<void(std::atomic<bool>&)>& storm,
                      const std::atomic<int>& done) {
    std::atomic<bool> stop{false};
    std::thread t([&] { storm(stop); });
    bool ok = eventually([&] { return done.load() >= 50; }, kDeadline);
    int before = done.load();
    ok = ok && cluster_.kill_and_restart_head({"--restore-grace-ms", "1000"});
    ok = ok && eventually([&] { return done.load() >= before + 50; }, kDeadline);
    stop = true;
    t.join();
    ASSERT_TRUE(ok) << "the storm did not go on through the restart (" << done.load()
                    << " operations)\nhead.log:\n"
                    << read_file(cluster_.dir() + "/head.log");
  }

  TempDir dir_;
  ScopedEnvs envs_;
  StandingCluster cluster_{TROUPE_CLI_PATH, dir_.path()};
};

TEST_F(HeadRestartStorm, PlacementGroupsAreBookedOnceEachAfterTheStorm) {
  Cluster c(driver());
  std::deque<std::string> held;  // the storm's thread only, until it is joined
  std::atomic<int> done{0};
  int in_doubt = 0;
  kill_head_amid(
      [&](std::atomic<bool>& stop) {
        for (int i = 0; !stop; ++i) {
          try {
            if (held.size() >= kMaxHeld) {
              std::string oldest = held.front();
              held.pop_front();  // in doubt when it throws: the head frees it by itself
              troupe::unbook(c, oldest);
            }
            auto got = troupe::try_book(c, "storm-" + std::to_string(i), {{.num_cpus = kGroupCpus}},
                                        "PACK", std::nullopt);
            ASSERT_TRUE(got.has_value()) << "a booking that fits did not";
            held.push_back("storm-" + std::to_string(i));
            ++done;
          } catch (const troupe::Error&) {  // the head is away
            ++in_doubt;
            std::this_thread::sleep_for(5ms);
          }
        }
      },
      done);
  EXPECT_GT(in_doubt, 0) << "the head was never away";
  const std::set<std::string> expected(held.begin(), held.end());
  const double free = kHostCpus - kGroupCpus * static_cast<double>(held.size());
  double cpus_free = -1;
  std::set<std::string> listed;
  EXPECT_TRUE(eventually(
      [&] {
        cpus_free = troupe::host_resources(c).at(0).cpus_free;
        listed = groups_in_status();
        return cpus_free == free && listed == expected;
      },
      kDeadline))
      << "free CPUs " << cpus_free << " (expected " << free << "), " << listed.size()
      << " groups listed, " << expected.size() << " held\n"
      << cluster_.status().output;
  for (const auto& id : held) EXPECT_TRUE(troupe::unbook(c, id)) << id;
  EXPECT_EQ(troupe::host_resources(c).at(0).cpus_free, kHostCpus);
}

TEST_F(HeadRestartStorm, EveryNameAfterTheStormPointsAtALiveWorker) {
  Cluster c(driver());
  struct Live {
    Worker worker;
    std::string name;
    bool registered;  // known to be: its register_name returned
  };
  std::deque<Live> live;  // the storm's thread only, until it is joined
  std::atomic<int> done{0};
  kill_head_amid(
      [&](std::atomic<bool>& stop) {
        for (int i = 0; !stop; ++i) {
          const std::string name = "n-" + std::to_string(i);
          std::optional<Worker> w;
          try {
            auto opts = calculator(name);
            opts.detached = i % 2 == 0;
            w = c.start_worker(opts);
            w->ready().get(kDeadline);
          } catch (const troupe::Error&) {  // not started: no worker to name
            if (w) w->stop();
            std::this_thread::sleep_for(5ms);
            continue;
          }
          NamedWorker r;
          r.name_space = "storm";
          r.name = name;
          r.detached = i % 2 == 0;
          r.host = "storm-a";
          r.worker = w->agent_name();
          r.tcp_endpoint = w->tcp_endpoint();
          r.pid = w->pid();
          bool registered = false;
          try {
            registered = !c.register_name(r).has_value();
            ASSERT_TRUE(registered) << name << " was taken";
          } catch (const troupe::Error&) {  // in doubt
          }
          live.push_back(Live{*w, name, registered});
          if (live.size() > 6) {  // its record goes with it (in doubt while the head is away)
            live.front().worker.stop();
            live.pop_front();
          }
          if (registered) ++done;
        }
      },
      done);
  std::map<std::string, pid_t> pid_of;  // the live workers, by agent name
  std::set<std::string> must_be_found;
  for (const auto& l : live) {
    pid_of[l.worker.agent_name()] = l.worker.pid();
    if (l.registered) must_be_found.insert(l.name);
  }
  std::vector<NamedWorker> names;
  EXPECT_TRUE(eventually(
      [&] {
        try {
          names = c.list_names();
        } catch (const troupe::Error&) {  // the driver is not connected to the head again yet
          return false;
        }
        std::set<std::string> found;
        for (const auto& n : names) {
          auto it = pid_of.find(n.worker);
          if (it == pid_of.end() || it->second != n.pid) return false;  // a dead worker's
          found.insert(n.name);
        }
        for (const auto& name : must_be_found)
          if (!found.count(name)) return false;
        return true;
      },
      kDeadline))
      << names.size() << " names, " << live.size() << " live workers\n"
      << cluster_.status().output;
  for (const auto& n : names) EXPECT_EQ(::kill(n.pid, 0), 0) << n.name << " names a dead pid";
  for (auto& l : live) l.worker.stop();
}

}  // namespace
}  // namespace troupe_failure
