import ray

ray.init(num_cpus=1)


@ray.remote(num_returns="streaming")
def count(n):
    for i in range(n):
        yield i * 10


gen = count.remote(4)
print(type(gen).__name__)
refs = list(gen)
print(len(refs), all(isinstance(r, ray.ObjectRef) for r in refs))
print(ray.get(refs))


@ray.remote
def implicit(n):  # a generator function: streaming by default
    for i in range(n):
        yield i


print([ray.get(r) for r in implicit.remote(3)])
print([ray.get(r) for r in count.options(num_returns="streaming").remote(0)])
ray.shutdown()
