import ray

ray.init(num_cpus=1)


@ray.remote
def child(x):
    return x + 1


@ray.remote
def parent(depth):
    # With one CPU, the child can run only because a task blocked in ray.get gives its CPU
    # back while it waits.
    if depth == 0:
        return 0
    return ray.get(child.remote(depth)) + ray.get(parent.remote(depth - 1))


print(ray.get(parent.remote(3), timeout=60))
ray.shutdown()
