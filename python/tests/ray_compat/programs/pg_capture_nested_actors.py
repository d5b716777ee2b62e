# timeout: 40
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(num_cpus=4)
pg = placement_group([{"CPU": 1}] * 4, strategy="PACK")
ray.get(pg.ready())


@ray.remote(num_cpus=1)
class Leaf:
    def where(self):
        cur = ray.util.get_current_placement_group()
        return cur is not None and cur.id == pg_id


@ray.remote(num_cpus=1)
class Supervisor:
    def __init__(self, n):
        self.leaves = [Leaf.remote() for _ in range(n)]

    def run(self):
        return ray.get([leaf.where.remote() for leaf in self.leaves])


pg_id = pg.id
sup = Supervisor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
    pg, placement_group_capture_child_tasks=True)).remote(3)
print(ray.get(sup.run.remote(), timeout=30))
ray.shutdown()
