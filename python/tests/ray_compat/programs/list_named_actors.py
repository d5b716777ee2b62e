import ray

ray.init(num_cpus=1, namespace="main")


@ray.remote
class A:
    def ping(self):
        return 1


a = A.options(name="alpha").remote()
b = A.options(name="beta", namespace="other").remote()
c = A.remote()
ray.get([a.ping.remote(), b.ping.remote(), c.ping.remote()])
print(sorted(ray.util.list_named_actors()))
print(sorted((d["namespace"], d["name"]) for d in ray.util.list_named_actors(all_namespaces=True)))
ray.kill(a)
ray.get(b.ping.remote())
import time

deadline = time.monotonic() + 30
while "alpha" in ray.util.list_named_actors() and time.monotonic() < deadline:
    time.sleep(0.05)
print(sorted(ray.util.list_named_actors()))
ray.shutdown()
