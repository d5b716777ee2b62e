import ray
from ray.util.placement_group import get_placement_group, placement_group

ray.init(num_cpus=2)
pg = placement_group([{"CPU": 1}], name="named-pg")
ray.get(pg.ready())
found = get_placement_group("named-pg")
print(found == pg, found.bundle_specs)
print(ray.util.get_placement_group("named-pg").id == pg.id)
try:
    get_placement_group("no-such-pg")
except ValueError as e:
    print("missing ->", type(e).__name__)
ray.util.remove_placement_group(pg)
ray.shutdown()
