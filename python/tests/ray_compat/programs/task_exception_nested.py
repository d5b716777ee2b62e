import ray

ray.init(num_cpus=2)


@ray.remote
def inner():
    raise KeyError("missing-key")


@ray.remote
def outer():
    return ray.get(inner.remote())


try:
    ray.get(outer.remote())
except KeyError as e:
    print("KeyError reaches the driver:", type(e).__name__)
    print("names the key:", "missing-key" in str(e))
    print("RayTaskError:", isinstance(e, ray.exceptions.RayTaskError))
ray.shutdown()
