import ray

ray.init(num_cpus=2)


@ray.remote
def leaf(x):
    return x + 1


@ray.remote
def fan_out(n):
    return sum(ray.get([leaf.remote(i) for i in range(n)]))


@ray.remote
def deeper(depth):
    if depth == 0:
        return 0
    return 1 + ray.get(deeper.remote(depth - 1))


print(ray.get(fan_out.remote(4)))
print(ray.get(deeper.remote(3)))
print(ray.get([fan_out.remote(n) for n in (1, 2, 3)]))
ray.shutdown()
