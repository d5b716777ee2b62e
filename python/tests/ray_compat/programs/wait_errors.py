import ray

ray.init(num_cpus=1)


@ray.remote
def f():
    return 1


r = f.remote()
for what, call in [("single ref", lambda: ray.wait(r)),
                   ("duplicates", lambda: ray.wait([r, r])),
                   ("too many", lambda: ray.wait([r], num_returns=2)),
                   ("not refs", lambda: ray.wait([1, 2]))]:
    try:
        call()
        print(what, "ok")
    except Exception as e:
        print(what, "->", type(e).__name__)
print(ray.wait([r], num_returns=1, timeout=10)[0] == [r])
print(ray.wait([], timeout=0))
ray.shutdown()
