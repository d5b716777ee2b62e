import ray

ray.init(num_cpus=1)


@ray.remote(num_returns=3)
def three():
    return "a", "b", "c"


@ray.remote
def pair():
    return 1, 2


a, b, c = three.remote()
print(ray.get([a, b, c]))
x, y = pair.options(num_returns=2).remote()
print(ray.get(y), ray.get(x))
print(ray.get(pair.remote()))
print(pair.options(num_returns=0).remote())
ray.shutdown()
