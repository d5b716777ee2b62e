// Control-plane rates on the embedded cluster, each against a floor in the same run:
//   - placement group create + remove (a VirtualCluster of one small bundle, no workers) per
//     second, against an in-process std::map insert + erase of the same record under a mutex
//     (the cost of the bookkeeping alone). In-process, no RPC: not comparable with Ray's
//     published 765/s, a driver talking to Ray's GCS over gRPC; the like-for-like figure is
//     bench/multihost_bench.cc's, through a standing head over TCP;
//   - dispatch planning of run_all_workers_sharded_data on a 4,096-worker sharding (16 x 16 x
//     16) plus MultiWorkerFuture's bookkeeping (results in return_from order over 4,096 ready
//     futures), measured without processes through the planning seam (controller/
//     dispatch_plan.h); target under 5 ms. Its floor: making and reading 4,096 ready futures.
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "bench_util.h"
#include "controller/dispatch_plan.h"

namespace {

std::unique_ptr<troupe::Cluster> g_cluster;

void BM_PlacementGroupCreateRemove(benchmark::State& state) {
  if (!g_cluster) g_cluster = std::make_unique<troupe::Cluster>(troupe_bench::quiet_cluster(1));
  troupe::VirtualClusterOptions o;
  o.bundle_ct_per_node_list = {1};
  o.use_gpus = false;
  o.cpus_per_bundle = 0.5;
  for (auto _ : state) {
    troupe::VirtualCluster vc(*g_cluster, o);
    benchmark::DoNotOptimize(vc.world_size());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PlacementGroupCreateRemove)->Unit(benchmark::kMicrosecond);

// The floor: the same record kept in a locked map, inserted and erased.
void BM_LockedMapInsertErase(benchmark::State& state) {
  std::mutex mu;
  std::map<std::string, std::vector<double>> groups;
  int n = 0;
  for (auto _ : state) {
    std::string id = "vc-" + std::to_string(n++) + "-pg0";
    {
      std::lock_guard<std::mutex> lock(mu);
      groups.emplace(id, std::vector<double>{0.5, 0, 0});
    }
    std::lock_guard<std::mutex> lock(mu);
    groups.erase(id);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LockedMapInsertErase)->Unit(benchmark::kMicrosecond);

const troupe::NamedSharding& big_mesh() {
  static const troupe::NamedSharding s =
      troupe::NamedSharding::from_shape({"pp", "dp", "tp"}, {16, 16, 16});
  return s;
}

// Every worker called (dp sharded, tp replicated, pp free with dummy calls), results from
// pp = 0 and tp = 0.
void BM_PlanSharded4096(benchmark::State& state) {
  troupe::ShardedCallOptions o;
  o.in_sharded_axes = {"dp"};
  o.replicate_on_axes = {"tp"};
  o.output_is_replicated = {"tp"};
  o.make_dummy_calls_to_free_axes = true;
  for (auto _ : state) {
    troupe::internal::ShardedPlan plan = troupe::internal::plan_sharded(big_mesh(), o);
    std::vector<troupe::Future<troupe::Value>> futures;
    futures.reserve(plan.called.size());
    for (size_t i = 0; i < plan.called.size(); ++i)
      futures.push_back(troupe::make_ready_future<troupe::Value>(troupe::Value(1)));
    troupe::MultiWorkerFuture f(std::move(futures), std::move(plan.called),
                                std::move(plan.return_from));
    benchmark::DoNotOptimize(f.results_or_errors().size());
  }
}
BENCHMARK(BM_PlanSharded4096)->Unit(benchmark::kMicrosecond);

void BM_ReadyFutures4096(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<troupe::Future<troupe::Value>> futures;
    futures.reserve(4096);
    for (size_t i = 0; i < 4096; ++i)
      futures.push_back(troupe::make_ready_future<troupe::Value>(troupe::Value(1)));
    size_t n = 0;
    for (const auto& f : futures) n += f.get().is_int();
    benchmark::DoNotOptimize(n);
  }
}
BENCHMARK(BM_ReadyFutures4096)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  return troupe_bench::bench_main(argc, argv, [](const troupe_bench::RecordingReporter& r) {
    g_cluster.reset();
    troupe_bench::print_ratio(r, "BM_PlacementGroupCreateRemove", "BM_LockedMapInsertErase",
                              /*rates=*/true,
                              "none: in-process; Ray's 765/s is for the networked path");
    troupe_bench::print_ratio(r, "BM_PlanSharded4096", "BM_ReadyFutures4096", /*rates=*/false,
                              "< 5 ms");
  });
}
