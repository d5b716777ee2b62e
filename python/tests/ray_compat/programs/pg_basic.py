import ray
from ray.util.placement_group import (placement_group, placement_group_table,
                                      remove_placement_group)

ray.init(num_cpus=4)
pg = placement_group([{"CPU": 1}, {"CPU": 2}], strategy="STRICT_PACK", name="trainers")
print(type(ray.get(pg.ready(), timeout=60)).__name__)
print(pg.wait(timeout_seconds=10))
print(pg.bundle_specs, pg.bundle_count)
t = placement_group_table(pg)
print(t["name"], t["strategy"], t["state"], sorted(t["bundles"].items()))
node_ids = set(t["bundles_to_node_id"].values())
print(len(t["bundles_to_node_id"]), node_ids == {ray.nodes()[0]["NodeID"]})
print(ray.util.get_current_placement_group())
remove_placement_group(pg)
print(placement_group_table(pg)["state"])
ray.shutdown()
