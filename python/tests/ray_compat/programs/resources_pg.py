import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group

ray.init(num_cpus=4, num_gpus=2)


def shown(d):
    return sorted((k, v) for k, v in d.items()
                  if k in ("CPU", "GPU") or k.startswith("bundle_group"))


def settled(expect_cpu):
    """available_resources() once it shows `expect_cpu` CPUs free (Ray's view is eventually
    consistent)."""
    deadline = time.monotonic() + 30
    while True:
        got = ray.available_resources()
        if got.get("CPU", 0) == expect_cpu or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


print("before:", shown(settled(4)))
pg = placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 2}], strategy="PACK")
ray.get(pg.ready(), timeout=60)
print("total with pg:", [kv for kv in shown(ray.cluster_resources()) if kv[0] in ("CPU", "GPU")])
print("available with pg:", [kv for kv in shown(settled(1)) if kv[0] in ("CPU", "GPU")])
print("pg resources listed:", any(k.startswith("CPU_group_") for k in ray.cluster_resources()))
remove_placement_group(pg)
print("after removal:", shown(settled(4)))
print("pg resources gone:", not any(k.startswith("CPU_group_") for k in settled(4)))
ray.shutdown()
