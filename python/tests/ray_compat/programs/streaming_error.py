import ray

ray.init(num_cpus=1)


@ray.remote
def flaky(n):
    for i in range(n):
        if i == 2:
            raise ValueError("item 2 is bad")
        yield i


out = []
for ref in flaky.remote(5):
    try:
        out.append(ray.get(ref))
    except ValueError as e:
        out.append(f"error: {type(e).__name__}")
print(out)
ray.shutdown()
