import ray

ray.init(num_cpus=2)


@ray.remote
def maybe(i):
    if i == 2:
        raise RuntimeError(f"item {i} failed")
    return i


refs = [maybe.remote(i) for i in range(4)]
try:
    ray.get(refs)
except RuntimeError as e:
    print("get of the list raises:", type(e).__name__, "item 2 failed" in str(e))
ok = [r for i, r in enumerate(refs) if i != 2]
print(ray.get(ok))
ray.shutdown()
