import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(num_cpus=2)
node_id = ray.nodes()[0]["NodeID"]


@ray.remote
def where():
    return ray.get_runtime_context().get_node_id()


@ray.remote
class A:
    def where(self):
        return ray.get_runtime_context().get_node_id()


hard = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
print(ray.get(where.options(scheduling_strategy=hard).remote()) == node_id)
a = A.options(scheduling_strategy=hard).remote()
print(ray.get(a.where.remote()) == node_id)
bogus = "ab" * 28
soft = NodeAffinitySchedulingStrategy(node_id=bogus, soft=True)
print("soft falls back:", ray.get(where.options(scheduling_strategy=soft).remote()) == node_id)
try:
    ray.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node_id=bogus, soft=False)).remote(), timeout=30)
    print("ran")
except Exception as e:
    print("hard affinity to a missing node ->", type(e).__name__)
ray.shutdown()
