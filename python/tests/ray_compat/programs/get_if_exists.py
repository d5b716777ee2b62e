import ray

ray.init(num_cpus=1)


@ray.remote
class Singleton:
    def __init__(self, label):
        self.label = label

    def label_(self):
        return self.label


first = Singleton.options(name="only", get_if_exists=True).remote("first")
second = Singleton.options(name="only", get_if_exists=True).remote("second")
print(ray.get(first.label_.remote()), ray.get(second.label_.remote()))
print(first == second)
ray.kill(first)
# The name is free once the actor is dead: get_if_exists creates a new one.
import time

deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        third = Singleton.options(name="only", get_if_exists=True).remote("third")
        label = ray.get(third.label_.remote())
        break
    except ray.exceptions.RayActorError:
        time.sleep(0.05)
print(label)
ray.shutdown()
