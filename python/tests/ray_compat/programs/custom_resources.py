import time

import ray

ray.init(num_cpus=2, resources={"slot": 2})


@ray.remote(resources={"slot": 1})
class Slotted:
    def ping(self):
        return "ok"


@ray.remote(resources={"slot": 1})
def in_slot():
    return "ran"


a, b = Slotted.remote(), Slotted.remote()
print(ray.get([a.ping.remote(), b.ping.remote()]))
c = Slotted.remote()
ready, _ = ray.wait([c.ping.remote()], timeout=1)
print("third waits for a slot:", len(ready))
ray.kill(a)
print(ray.get(c.ping.remote(), timeout=60))
ray.kill(b)
print(ray.get(in_slot.remote(), timeout=60))
print(ray.cluster_resources()["slot"])
ray.shutdown()
