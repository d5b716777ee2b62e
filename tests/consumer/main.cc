// A program built against an installed troupe: checks that the public headers, the library and
// its dependencies are found through find_package(troupe), and that it really drives workers
// (a 2-worker group on an embedded cluster, one sharded and one replicated call).
#include <cstdio>
#include <string>
#include <vector>

#include "troupe/troupe.h"

class Counter {
 public:
  explicit Counter(int base) : base_(base) {}
  int64_t sum(std::vector<int64_t> values) {
    int64_t s = base_;
    for (auto v : values) s += v;
    return s;
  }

 private:
  int base_;
};
TROUPE_WORKER_CLASS(Counter, cls) {
  cls.constructor<int>({"base"});
  cls.method("sum", &Counter::sum, {"values"});
}

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  std::printf("troupe consumer: version %s\n", troupe::version());
  try {
    troupe::ClusterOptions options = troupe::ClusterOptions::local(1);
    options.log_to_driver = false;
    troupe::Cluster runtime(options);
    troupe::VirtualClusterOptions vco;
    vco.bundle_ct_per_node_list = {2};
    vco.use_gpus = false;
    troupe::VirtualCluster cluster(runtime, vco);
    troupe::WorkerGroupOptions wgo;
    wgo.name_prefix = "counter";
    wgo.show_progress = false;
    troupe::WorkerGroup group(cluster, troupe::WorkerBuilder("Counter", {{"base", 100}}), wgo);
    troupe::ShardedCallOptions how;
    how.in_sharded_axes = {"dp"};
    auto sharded = group.get_all_worker_results(group.run_all_workers_sharded_data(
        "sum", {{"values", troupe::Array{troupe::Array{1, 2}, troupe::Array{3, 4}}}}, how));
    auto same = group.get_all_worker_results(
        group.run_all_workers_single_data("sum", {{"values", troupe::Array{5}}}));
    std::printf("sharded: %lld %lld; replicated: %lld %lld\n",
                static_cast<long long>(sharded.at(0).as_int()),
                static_cast<long long>(sharded.at(1).as_int()),
                static_cast<long long>(same.at(0).as_int()),
                static_cast<long long>(same.at(1).as_int()));
    bool ok = sharded.at(0).as_int() == 103 && sharded.at(1).as_int() == 107 &&
              same.at(0).as_int() == 105 && same.at(1).as_int() == 105;
    return ok ? 0 : 1;
  } catch (const troupe::Error& e) {
    std::fprintf(stderr, "troupe consumer failed: %s\n", e.what());
    return 1;
  }
}
