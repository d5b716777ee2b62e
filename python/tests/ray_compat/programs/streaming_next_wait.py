import ray

ray.init(num_cpus=1)


@ray.remote
def gen(n):
    for i in range(n):
        yield {"i": i}


g = gen.remote(3)
first = next(g)
print(ray.get(first))
ready, _ = ray.wait([next(g)], num_returns=1, timeout=30)
print(ray.get(ready))
print([ray.get(r) for r in g])
try:
    next(g)
except StopIteration:
    print("StopIteration at the end")
ray.shutdown()
