import ray

ray.init(num_cpus=1)


@ray.remote
def fail(msg):
    raise ValueError(msg)


try:
    ray.get(fail.remote("bad input 42"))
except ValueError as e:
    print("caught as ValueError:", type(e).__name__)
    print("RayTaskError:", isinstance(e, ray.exceptions.RayTaskError))
    print("RayError:", isinstance(e, ray.exceptions.RayError))
    print("message names the cause:", "bad input 42" in str(e), "ValueError" in str(e))
    print("cause:", type(e.cause).__name__, e.cause.args)
    print("args:", e.args)
ray.shutdown()
