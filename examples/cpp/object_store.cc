// The README's object-store snippet in a runnable program: one value put into the store of the
// driver's host once, then passed to every worker of a group twice; each worker maps the same
// object read-only. Built and run by examples/CMakeLists.txt (test example_object_store).
#include <troupe/troupe.h>

#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

class Loader {
 public:
  // Returns the sum of the bytes it received, so the driver can check what arrived.
  int64_t load(troupe::Bytes weights) {
    int64_t sum = 0;
    for (size_t i = 0; i < weights.size(); ++i) sum += weights.data()[i];
    return sum;
  }
};
TROUPE_WORKER_CLASS(Loader, cls) { cls.method("load", &Loader::load, {"weights"}); }

int main(int argc, char** argv) {
  troupe::init(argc, argv);
  troupe::Cluster runtime(troupe::ClusterOptions::local(/*hosts=*/1, /*gpus_per_host=*/0));
  troupe::VirtualClusterOptions vco;
  vco.bundle_ct_per_node_list = {2};
  vco.use_gpus = false;
  troupe::VirtualCluster cluster(runtime, vco);
  troupe::WorkerGroup group(cluster, troupe::WorkerBuilder("Loader", {}), {});

  std::vector<uint8_t> buffer(8 << 20, 1);                                    // 8 MiB of ones
  troupe::ObjectRef weights = runtime.put(troupe::Bytes(std::move(buffer)));  // written once
  group.run_all_workers_single_data("load", {{"weights", weights}});          // mapped by each
  group.run_all_workers_single_data("load", {{"weights", weights}});          // same object

  std::vector<troupe::Value> sums = group.get_all_worker_results(
      group.run_all_workers_single_data("load", {{"weights", weights}}));
  std::printf("objects in the store: %lld\n",
              static_cast<long long>(runtime.object_store_usage(0).objects));
  for (const troupe::Value& sum : sums)
    std::printf("sum %lld\n", static_cast<long long>(sum.as_int()));
  group.shutdown();
}
