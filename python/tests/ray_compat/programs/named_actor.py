import ray

ray.init(num_cpus=1, namespace="corpus")


@ray.remote
class Registry:
    def __init__(self):
        self.d = {}

    def set(self, k, v):
        self.d[k] = v

    def get(self, k):
        return self.d.get(k)


r = Registry.options(name="registry").remote()
ray.get(r.set.remote("a", 1))
same = ray.get_actor("registry")
print(ray.get(same.get.remote("a")), same == r)
print(ray.get(ray.get_actor("registry", namespace="corpus").get.remote("a")))
try:
    ray.get_actor("missing")
except ValueError as e:
    print("missing ->", type(e).__name__, "missing" in str(e))
try:
    Registry.options(name="registry").remote()
except ValueError as e:
    print("taken ->", type(e).__name__, "registry" in str(e))
try:
    ray.get_actor("registry", namespace="elsewhere")
except ValueError:
    print("other namespace: not found")
ray.kill(r)
try:
    ray.get_actor("registry")
    print("found after kill")
except ValueError:
    print("name freed by kill")
ray.shutdown()
