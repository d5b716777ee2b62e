// Round-trip latency of one no-op call, against the floor of a blocking Unix-socket ping-pong
// between two processes, both measured in the same run.
//
//   BM_UnixSocketPingPong  the floor: a forked child echoes a 64-byte message over a socketpair
//                          (blocking read/write on both ends); one iteration = one round trip.
//   BM_NoopCallRoundTrip   one embedded host, one worker; one iteration =
//                          w.call<void>("noop").get().
//
// After the runs, main() prints NoopCall / PingPong (target in the issue: <= 1.5x).
#include <benchmark/benchmark.h>

#include <memory>

#include "bench_util.h"
#include "troupe/troupe.h"

namespace {

using troupe_bench::EchoChild;
using troupe_bench::kFloorMessageBytes;

void BM_UnixSocketPingPong(benchmark::State& state) {
  EchoChild child;
  char out[kFloorMessageBytes] = {1};
  char in[kFloorMessageBytes];
  for (auto _ : state) {
    if (!troupe_bench::write_all(child.fd(), out, sizeof(out)) ||
        !troupe_bench::read_all(child.fd(), in, sizeof(in))) {
      state.SkipWithError("echo child went away");
      break;
    }
    benchmark::DoNotOptimize(in);
  }
}
BENCHMARK(BM_UnixSocketPingPong)->UseRealTime()->Unit(benchmark::kMicrosecond);

// One cluster and worker for every run of BM_NoopCallRoundTrip (Google Benchmark calls the
// function several times while it picks the iteration count); released at the end of main.
struct NoopFixture {
  troupe::Cluster cluster{troupe_bench::quiet_cluster(1)};
  troupe::Worker worker;
  NoopFixture() {
    worker = cluster.start_worker(troupe_bench::bench_worker(0, "noop-0"));
    worker.ready().get(std::chrono::seconds(60));
    for (int i = 0; i < 100; ++i) worker.call<void>("noop").get();  // warm up both ends
  }
};
std::unique_ptr<NoopFixture> g_noop;

void BM_NoopCallRoundTrip(benchmark::State& state) {
  if (!g_noop) g_noop = std::make_unique<NoopFixture>();
  const troupe::Worker& w = g_noop->worker;
  for (auto _ : state) w.call<void>("noop").get();
}
BENCHMARK(BM_NoopCallRoundTrip)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  return troupe_bench::bench_main(argc, argv, [](const troupe_bench::RecordingReporter& r) {
    g_noop.reset();
    troupe_bench::print_ratio(r, "BM_NoopCallRoundTrip", "BM_UnixSocketPingPong",
                              /*rates=*/false, "<= 1.5x");
  });
}
