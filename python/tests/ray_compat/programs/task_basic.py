import ray

ray.init(num_cpus=2)


@ray.remote
def square(x):
    return x * x


@ray.remote
def add(a, b):
    return a + b


refs = [square.remote(i) for i in range(5)]
print(ray.get(refs))
print(ray.get(add.remote(square.remote(3), square.remote(4))))
print(ray.get(add.remote(ray.put(10), b=5)))
print(ray.get(square.options(num_cpus=0.5).remote(7)))
print(type(refs[0]).__name__, isinstance(refs[0], ray.ObjectRef))
ray.shutdown()
