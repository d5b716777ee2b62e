import os

import ray

ray.init(num_cpus=1)


@ray.remote
class Fragile:
    def die(self):
        os._exit(3)

    def ping(self):
        return "pong"


f = Fragile.remote()
print(ray.get(f.ping.remote()))
try:
    ray.get(f.die.remote())
except ray.exceptions.RayActorError as e:
    print(type(e).__name__, isinstance(e, ray.exceptions.ActorDiedError))
try:
    ray.get(f.ping.remote())
except ray.exceptions.RayActorError as e:
    print("later calls fail too:", type(e).__name__)
ray.shutdown()
