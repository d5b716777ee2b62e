import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(num_cpus=4)
pg = placement_group([{"CPU": 1}, {"CPU": 1}])
ray.get(pg.ready())


@ray.remote(num_cpus=1)
def where():
    cur = ray.util.get_current_placement_group()
    return cur is not None and cur.id == pg_id


@ray.remote(num_cpus=1)
class InGroup:
    def where(self):
        cur = ray.util.get_current_placement_group()
        return cur is not None and cur.id == pg_id


pg_id = pg.id
in_pg = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=1)
print(ray.get(where.options(scheduling_strategy=in_pg).remote()))
print(ray.get(where.remote()))
a = InGroup.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
print(ray.get(a.where.remote()))
remove_placement_group(pg)
try:
    ray.get(a.where.remote(), timeout=60)
except ray.exceptions.RayActorError:
    print("removing the group kills its actors")
ray.shutdown()
