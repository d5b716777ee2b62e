import ray
from ray.util.placement_group import placement_group, remove_placement_group

ray.init(num_cpus=2)
pg = placement_group([{"CPU": 8}])
print(pg.wait(timeout_seconds=0.5))
ready, pending = ray.wait([pg.ready()], timeout=0.5)
print(len(ready), len(pending))
try:
    ray.get(pg.ready(), timeout=0.5)
except ray.exceptions.GetTimeoutError:
    print("GetTimeoutError")
remove_placement_group(pg)
ray.shutdown()
