import os

import ray

ray.init(num_cpus=2)


@ray.remote
class Tally:
    def __init__(self):
        self.n = 0

    def bump(self):
        self.n += 1
        return self.n


@ray.remote(max_restarts=1, max_task_retries=1)
class Crashy:
    def __init__(self, tally):
        self.tally = tally

    def work(self):
        if ray.get(self.tally.bump.remote()) == 1:
            os._exit(1)  # the first attempt kills the actor; it restarts and the call is retried
        return "retried after restart"


tally = Tally.remote()
c = Crashy.remote(tally)
print(ray.get(c.work.remote(), timeout=60))


@ray.remote(max_restarts=1, max_task_retries=1)
class Raises:
    def __init__(self):
        self.n = 0

    def work(self):
        self.n += 1
        raise ValueError(f"call {self.n}")


r = Raises.remote()
try:
    ray.get(r.work.remote())
except ValueError as e:
    print("application errors are not retried:", "call 1" in str(e))


@ray.remote(max_restarts=1, max_task_retries=2)
class RaisesRetried:
    def __init__(self):
        self.n = 0

    @ray.method(retry_exceptions=True)
    def work(self):
        self.n += 1
        if self.n < 3:
            raise ValueError(f"call {self.n}")
        return f"call {self.n} succeeded"


print(ray.get(RaisesRetried.remote().work.remote()))
ray.shutdown()
