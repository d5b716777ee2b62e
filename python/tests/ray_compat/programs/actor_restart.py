# xfail: calls during an actor restart raise ActorDiedError, not ActorUnavailableError, and max_restarts counts differ
import os

import ray

ray.init(num_cpus=1)


@ray.remote(max_restarts=2)
class Phoenix:
    def __init__(self):
        self.calls = 0

    def call(self):
        self.calls += 1
        return self.calls

    def die(self):
        os._exit(1)


p = Phoenix.remote()
print(ray.get([p.call.remote(), p.call.remote()]))
for round_ in range(3):
    try:
        ray.get(p.die.remote())
    except ray.exceptions.RayActorError as e:
        print("died:", type(e).__name__)
    try:
        print("after death", round_ + 1, "state reset:", ray.get(p.call.remote()))
    except ray.exceptions.RayActorError as e:
        print("after death", round_ + 1, "dead for good:", type(e).__name__)
ray.shutdown()
