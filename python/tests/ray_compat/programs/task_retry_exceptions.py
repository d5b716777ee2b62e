import ray

ray.init(num_cpus=1)


@ray.remote
class Tally:
    def __init__(self):
        self.n = {}

    def bump(self, key):
        self.n[key] = self.n.get(key, 0) + 1
        return self.n[key]


tally = Tally.remote()


@ray.remote(max_retries=3, retry_exceptions=True)
def flaky(key, fail_times):
    attempt = ray.get(tally.bump.remote(key))
    if attempt <= fail_times:
        raise ValueError(f"attempt {attempt} failed")
    return f"succeeded on attempt {attempt}"


print(ray.get(flaky.remote("a", 2)))
try:
    ray.get(flaky.remote("b", 10))
except ValueError as e:
    print("gave up:", "attempt 4 failed" in str(e))


@ray.remote(max_retries=2, retry_exceptions=[KeyError])
def only_key_errors(key, exc):
    attempt = ray.get(tally.bump.remote(key))
    if attempt == 1:
        raise exc("first")
    return attempt


print(ray.get(only_key_errors.remote("c", KeyError)))
try:
    ray.get(only_key_errors.remote("d", ValueError))
except ValueError:
    print("ValueError is not retried:", ray.get(tally.bump.remote("d")) - 1)


@ray.remote
def no_retry_by_default(key):
    ray.get(tally.bump.remote(key))
    raise ValueError("x")


try:
    ray.get(no_retry_by_default.remote("e"))
except ValueError:
    print("application errors are not retried by default:", ray.get(tally.bump.remote("e")) - 1)
print(ray.get(flaky.options(max_retries=0).remote("f", 0)))
ray.shutdown()
