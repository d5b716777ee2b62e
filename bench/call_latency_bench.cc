// Round-trip latency of one no-op call, against the floor of a blocking Unix-socket ping-pong
// between two processes, both measured in the same run.
//
//   BM_UnixSocketPingPong  the floor: a forked child echoes a 64-byte message over a socketpair
//                          (blocking read/write on both ends); one iteration = one round trip.
//   BM_ZmqReqRepPingPong   a peer: a forked child binds a ZeroMQ REP socket on ipc:// (a Unix
//                          socket underneath) and echoes; this process sends 64 bytes on a REQ
//                          socket and receives the reply. Built when libzmq is found
//                          (pkg-config libzmq); otherwise main() prints that it was skipped.
//   BM_NoopCallRoundTrip   one embedded host, one worker; one iteration =
//                          w.call<void>("noop").get().
//
// After the runs, main() prints NoopCall / PingPong (target in issue 10: <= 1.2x) and
// NoopCall / ZeroMQ.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <string>

#ifdef TROUPE_BENCH_HAVE_ZMQ
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <csignal>
#endif

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

#ifdef TROUPE_BENCH_HAVE_ZMQ
void BM_ZmqReqRepPingPong(benchmark::State& state) {
  std::string endpoint = "ipc:///tmp/troupe_bench_zmq." + std::to_string(::getpid());
  int ready[2];
  if (::pipe(ready) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid == 0) {  // the REP echo: a fresh context in the child (none is shared across fork)
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    void* ctx = zmq_ctx_new();
    void* rep = zmq_socket(ctx, ZMQ_REP);
    char ok = zmq_bind(rep, endpoint.c_str()) == 0 ? 1 : 0;
    (void)!::write(ready[1], &ok, 1);
    char buf[troupe_bench::kFloorMessageBytes];
    for (;;) {
      int n = zmq_recv(rep, buf, sizeof(buf), 0);
      if (n < 0 || n == 1) break;  // a 1-byte message: stop
      if (zmq_send(rep, buf, static_cast<size_t>(n), 0) < 0) break;
    }
    zmq_send(rep, buf, 1, 0);
    zmq_close(rep);
    zmq_ctx_term(ctx);
    ::_exit(0);
  }
  char ok = 0;
  if (::read(ready[0], &ok, 1) != 1 || !ok) {
    state.SkipWithError("the ZeroMQ REP child could not bind");
    ::waitpid(pid, nullptr, 0);
    return;
  }
  ::close(ready[0]);
  ::close(ready[1]);
  void* ctx = zmq_ctx_new();
  void* req = zmq_socket(ctx, ZMQ_REQ);
  zmq_connect(req, endpoint.c_str());
  char out[kFloorMessageBytes] = {1};
  char in[kFloorMessageBytes];
  for (auto _ : state) {
    if (zmq_send(req, out, sizeof(out), 0) < 0 || zmq_recv(req, in, sizeof(in), 0) < 0) {
      state.SkipWithError("ZeroMQ ping-pong failed");
      break;
    }
    benchmark::DoNotOptimize(in);
  }
  zmq_send(req, out, 1, 0);  // stop the child
  zmq_recv(req, in, sizeof(in), 0);
  int linger = 0;
  zmq_setsockopt(req, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(req);
  zmq_ctx_term(ctx);
  ::waitpid(pid, nullptr, 0);
  ::unlink(endpoint.substr(6).c_str());
}
BENCHMARK(BM_ZmqReqRepPingPong)->UseRealTime()->Unit(benchmark::kMicrosecond);
#endif

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
                              /*rates=*/false, "<= 1.2x");
#ifdef TROUPE_BENCH_HAVE_ZMQ
    troupe_bench::print_ratio(r, "BM_NoopCallRoundTrip", "BM_ZmqReqRepPingPong",
                              /*rates=*/false, "none (peer)");
#else
    std::printf("BM_ZmqReqRepPingPong: skipped (built without libzmq: pkg-config libzmq not "
                "found)\n");
#endif
  });
}
