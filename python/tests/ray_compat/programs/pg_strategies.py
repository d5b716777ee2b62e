import ray
from ray.util.placement_group import placement_group, remove_placement_group

ray.init(num_cpus=2)
for strategy in ("PACK", "SPREAD", "STRICT_PACK"):
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy=strategy)
    print(strategy, pg.wait(timeout_seconds=30))
    remove_placement_group(pg)
# One node cannot hold two bundles under STRICT_SPREAD: the group stays pending.
pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
print("STRICT_SPREAD", pg.wait(timeout_seconds=1))
remove_placement_group(pg)
try:
    placement_group([{"CPU": 1}], strategy="BOGUS")
except ValueError as e:
    print("bad strategy ->", type(e).__name__)
try:
    placement_group([{"CPU": 0}])
except ValueError as e:
    print("empty bundle ->", type(e).__name__)
ray.shutdown()
