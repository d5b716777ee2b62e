import ray

ray.init(num_cpus=1)
values = [None, 0, -3, 2.5, "text", b"bytes", [1, [2]], {"k": (1, 2)}, {3, 4}, True]
refs = [ray.put(v) for v in values]
print(ray.get(refs) == values)
for v in ray.get(refs):
    print(type(v).__name__, v)
try:
    ray.put(refs[0])
except TypeError as e:
    print("put of a ref:", type(e).__name__)
try:
    ray.get(5)
except (TypeError, ValueError) as e:
    print("get of a non-ref:", type(e).__name__)
ray.shutdown()
