import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

ray.init(num_cpus=4)
pg = placement_group([{"CPU": 2}])
ray.get(pg.ready())


@ray.remote(num_cpus=1)
def child():
    cur = ray.util.get_current_placement_group()
    return None if cur is None else cur.id


@ray.remote(num_cpus=1)
def parent():
    return ray.get(child.remote())


capture = PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=True)
no_capture = PlacementGroupSchedulingStrategy(pg, placement_group_capture_child_tasks=False)
print("captured:", ray.get(parent.options(scheduling_strategy=capture).remote()) == pg.id)
print("not captured:", ray.get(parent.options(scheduling_strategy=no_capture).remote()))


@ray.remote(num_cpus=1)
def escape():
    return ray.get(child.options(scheduling_strategy="DEFAULT").remote())


print("DEFAULT escapes:", ray.get(escape.options(scheduling_strategy=capture).remote()))
ray.shutdown()
