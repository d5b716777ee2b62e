import numpy as np
import troupe

vc = troupe.VirtualCluster(bundle_ct_per_node_list=[2, 2], use_gpus=True, num_gpus_per_node=2)
group = troupe.WorkerGroup(vc, troupe.WorkerBuilder("mypkg.policy.Policy", lr=0.5),
                           name_prefix="policy",
                           sharding_annotations=troupe.NamedSharding([[0, 1], [2, 3]], ["dp", "tp"]))
shard0, shard1 = [1.0, 2.0], [3.0, 4.0]
f = group.run_all_workers_sharded_data("train", batch=[shard0, shard1], in_sharded_axes=["dp"],
                                       replicate_on_axes=["tp"], output_is_replicated=["tp"],
                                       common_kwargs={"step": 1})
print("losses:", group.get_all_worker_results(f))              # one per dp shard
print("all:", group.run_all_workers_single_data("train", np.ones(4), step=0).result(timeout=60))
second = group.slice(dp=1)                            # workers 2 and 3 as a 1-D (tp) mesh
print("slice:", second.run_all_workers_single_data("train", batch=[1.0], step=2).result(timeout=60))
group.shutdown(); vc.shutdown()
