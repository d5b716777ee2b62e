// Placement groups booked by several drivers in the head's one book, over TCP (issue 31 part 1):
// a head in this process listening on 127.0.0.1, 100 hosts registered by agent connections of
// their own (8 CPUs each), and D driver connections, each on a thread of its own, creating and
// removing placement groups of one 1-CPU bundle (reserve, then release: two sequential round
// trips, what a VirtualCluster's creation and shutdown send) as fast as they can, for every D
// in --drivers. Checked (exit 1 otherwise): every reserve succeeds and the head holds no group
// at the end.
// The floor, the same run and the same connections: two round trips that book nothing (release
// of an id that is not booked), so the ratio is what booking adds to the RPC. Ray's published
// rate is ~700 placement groups/s created and removed (not measured here).
//
//   build/bench/shared_book_bench [--seconds 2] [--drivers 1,2,4] [--hosts 100]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "head/head.h"
#include "transport/io_loop.h"
#include "transport/listener.h"
#include "transport/rpc_peer.h"
#include "wire/control.h"
#include "wire/head_protocol.h"

namespace {

namespace control = troupe::wire::control;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
const std::string kToken = "shared-book-bench-token";

std::shared_ptr<troupe::transport::RpcPeer> connect(troupe::transport::IoLoop& loop,
                                                    const std::string& endpoint) {
  std::promise<std::shared_ptr<troupe::transport::Connection>> connected;
  troupe::transport::async_connect(
      loop.context(), endpoint, kToken, 5000ms,
      [&connected](std::shared_ptr<troupe::transport::Connection> c, const troupe::Error* e) {
        if (e)
          connected.set_exception(std::make_exception_ptr(*e));
        else
          connected.set_value(c);
      });
  auto c = connected.get_future().get();
  std::shared_ptr<troupe::transport::RpcPeer> peer;
  loop.run_sync(
      [&] { peer = troupe::transport::RpcPeer::attach(c, troupe::wire::FrameLimits{}, {}); });
  return peer;
}

struct Rate {
  double per_second = 0;
  bool ok = true;
};

// D drivers, each looping for `seconds`: `book` true creates and removes a group per iteration,
// false sends the two round trips that book nothing.
Rate run(const std::vector<std::shared_ptr<troupe::transport::RpcPeer>>& drivers, double seconds,
         bool book) {
  std::atomic<uint64_t> done{0};
  std::atomic<bool> ok{true};
  std::vector<std::thread> threads;
  auto until = Clock::now() + std::chrono::duration<double>(seconds);
  auto t0 = Clock::now();
  for (size_t d = 0; d < drivers.size(); ++d)
    threads.emplace_back([&, d] {
      uint64_t n = 0;
      while (Clock::now() < until) {
        std::string id = "d" + std::to_string(d) + "-pg" + std::to_string(n++);
        try {
          if (book) {
            control::Reserve m;
            m.group_id = id;
            m.bundles = {control::BundleSpec{1, 0, 0, {}, {}}};
            drivers[d]->call(control::Reserve::kMethod, m.to_map()).get(5000ms);
          } else {
            drivers[d]
                ->call(control::Release::kMethod, control::Release{id + "-none"}.to_map())
                .get(5000ms);
          }
          drivers[d]->call(control::Release::kMethod, control::Release{id}.to_map()).get(5000ms);
        } catch (const troupe::Error& e) {
          std::printf("FAIL driver %zu: %s\n", d, e.message().c_str());
          ok = false;
          return;
        }
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  for (auto& t : threads) t.join();
  double took = std::chrono::duration<double>(Clock::now() - t0).count();
  return Rate{static_cast<double>(done.load()) / took, ok.load()};
}

std::vector<size_t> parse_list(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoul(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  std::vector<size_t> driver_counts{1, 2, 4};
  size_t host_count = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--seconds")
      seconds = std::stod(argv[i + 1]);
    else if (flag == "--drivers")
      driver_counts = parse_list(argv[i + 1]);
    else if (flag == "--hosts")
      host_count = std::stoul(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s (--seconds, --drivers, --hosts)\n", flag.c_str());
      return 2;
    }
  }
  troupe::transport::IoLoop loop;
  troupe::head::Head head(loop.context(), "tcp:127.0.0.1:0", kToken);
  std::vector<std::shared_ptr<troupe::transport::RpcPeer>> agents;
  for (size_t h = 0; h < host_count; ++h) {
    auto agent = connect(loop, head.endpoint());
    control::RegisterAgent reg;
    reg.host_name = "host-" + std::to_string(h);
    reg.address = "127.0.1." + std::to_string(h + 1);
    reg.num_cpus = 8;
    agent->call(control::RegisterAgent::kMethod, reg.to_map()).get(5000ms);
    agents.push_back(agent);
  }
  std::printf("head on %s, %zu hosts of 8 CPUs; groups of one 1-CPU bundle, %.1f s per row\n",
              head.endpoint().c_str(), host_count, seconds);
  bool ok = true;
  for (size_t count : driver_counts) {
    std::vector<std::shared_ptr<troupe::transport::RpcPeer>> drivers;
    for (size_t d = 0; d < count; ++d) drivers.push_back(connect(loop, head.endpoint()));
    Rate floor = run(drivers, seconds, false);
    Rate booked = run(drivers, seconds, true);
    ok = ok && floor.ok && booked.ok;
    std::printf(
        "%zu driver(s): create+remove %.0f/s; floor (2 round trips booking nothing) %.0f/s; "
        "%.2fx the floor's time\n",
        count, booked.per_second, floor.per_second, floor.per_second / booked.per_second);
    for (auto& d : drivers) d->close(troupe::Error(troupe::ErrorCode::kShutdown, "bench over"));
  }
  if (!head.placement_groups().empty()) {
    std::printf("FAIL: the head still holds %zu groups\n", head.placement_groups().size());
    ok = false;
  }
  for (auto& a : agents) a->close(troupe::Error(troupe::ErrorCode::kShutdown, "bench over"));
  loop.run_sync([] {});
  head.close();
  loop.run_sync([] {});
  return ok ? 0 : 1;
}
