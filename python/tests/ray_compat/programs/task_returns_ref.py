import ray

ray.init(num_cpus=1)


@ray.remote
def make():
    return ray.put([1, 2, 3])


@ray.remote
def twice(x):
    return x * 2


inner = ray.get(make.remote())
print(type(inner).__name__)
print(ray.get(inner))
print(ray.get(twice.remote(inner)))
ray.shutdown()
