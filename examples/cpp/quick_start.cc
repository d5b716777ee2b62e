// The README's C++ quick start, whole and runnable: an embedded cluster of 2 simulated hosts
// with 2 declared GPUs each, a dp x tp = 2 x 2 worker group, a sharded call and a broadcast.
// Built and run by examples/CMakeLists.txt (test example_quick_start).
#include <troupe/troupe.h>

#include <cstdio>
#include <numeric>
#include <vector>

class Policy {
 public:
  explicit Policy(double lr) : lr_(lr) {}
  double train(std::vector<double> batch, int step) {
    return std::accumulate(batch.begin(), batch.end(), 0.0) * lr_ + step;
  }
  void load_weights(troupe::Bytes weights) { weights_ = weights; }

 private:
  double lr_;
  troupe::Bytes weights_;
};
TROUPE_WORKER_CLASS(Policy, cls) {
  cls.constructor<double>({"lr"});
  cls.method("train", &Policy::train, {"batch", "step"});
  cls.method("load_weights", &Policy::load_weights, {"weights"});
}

int main(int argc, char** argv) {
  troupe::init(argc, argv);  // runs the worker or agent role when this process is one
  troupe::Cluster runtime(troupe::ClusterOptions::local(/*hosts=*/2, /*gpus_per_host=*/2));
  troupe::VirtualClusterOptions vco;
  vco.bundle_ct_per_node_list = {2, 2};  // 2 GPU bundles on each of 2 hosts
  troupe::VirtualCluster cluster(runtime, vco);

  troupe::WorkerGroupOptions wgo;
  wgo.name_prefix = "policy";
  wgo.sharding = troupe::NamedSharding::from_shape({"dp", "tp"}, {2, 2});
  troupe::WorkerGroup group(cluster, troupe::WorkerBuilder("Policy", {{"lr", 0.5}}), wgo);

  // Data split over dp, replicated over tp; one result per dp shard.
  troupe::Array shard0{1.0, 2.0}, shard1{3.0, 4.0};
  troupe::ShardedCallOptions how;
  how.in_sharded_axes = {"dp"};
  how.replicate_on_axes = {"tp"};
  how.output_is_replicated = {"tp"};
  how.common_kwargs = {{"step", 1}};
  auto f =
      group.run_all_workers_sharded_data("train", {{"batch", troupe::Array{shard0, shard1}}}, how);
  std::vector<troupe::Value> losses = group.get_all_worker_results(f);
  std::printf("losses: %g %g\n", losses[0].as_double(), losses[1].as_double());

  // The same bytes to every worker, encoded once and sent as raw attachments.
  std::vector<uint8_t> blob(4096, 7);
  group.run_all_workers_single_data("load_weights", {{"weights", troupe::Bytes(blob)}}).get();
  group.shutdown();  // also on destruction; then cluster and runtime shut down
}
