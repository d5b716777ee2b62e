import ray

ray.init(num_cpus=2)


@ray.remote
def boom():
    raise ValueError("x")


@ray.remote
def ok():
    return 7


refs = [boom.remote(), ok.remote()]
ready, rest = ray.wait(refs, num_returns=2)
print("a failed task counts as ready:", len(ready), len(rest))
for r in ready:
    try:
        print(ray.get(r))
    except ValueError:
        print("raised ValueError")
ray.shutdown()
