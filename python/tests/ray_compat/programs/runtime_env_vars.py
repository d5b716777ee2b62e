import os

import ray

ray.init(num_cpus=1, runtime_env={"env_vars": {"JOB_LEVEL": "job", "SHARED": "from job"}})


@ray.remote
def read(*names):
    return [os.environ.get(n) for n in names]


@ray.remote(runtime_env={"env_vars": {"SHARED": "from actor"}})
class Reader:
    def read(self, *names):
        return [os.environ.get(n) for n in names]


print(ray.get(read.remote("JOB_LEVEL", "SHARED")))
print(ray.get(read.options(runtime_env={"env_vars": {"TASK": "t"}}).remote("TASK", "JOB_LEVEL")))
r = Reader.remote()
print(ray.get(r.read.remote("JOB_LEVEL", "SHARED")))
print(ray.get(read.remote("TASK")))
ray.shutdown()
