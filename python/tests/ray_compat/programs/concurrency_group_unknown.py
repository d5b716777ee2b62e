# xfail: an unknown concurrency group raises ValueError at the call, Ray kills the actor (ActorDiedError)
import ray

ray.init(num_cpus=1)


@ray.remote(concurrency_groups={"io": 1})
class A:
    async def f(self):
        return 1


a = A.remote()
print(ray.get(a.f.remote()))
try:
    ray.get(a.f.options(concurrency_group="nope").remote())
    print("unknown group accepted")
except Exception as e:
    print("unknown group ->", type(e).__name__)
ray.shutdown()
