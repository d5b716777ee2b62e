import os
import tempfile
import time

import ray

ray.init(num_cpus=1)


@ray.remote
def stubborn(path):
    open(path, "w").close()
    while True:
        try:
            time.sleep(0.01)
        except KeyboardInterrupt:
            pass  # ignores the polite cancel


started = os.path.join(tempfile.mkdtemp(), "started")
ref = stubborn.remote(started)
while not os.path.exists(started):
    time.sleep(0.01)
ray.cancel(ref, force=True)
try:
    ray.get(ref, timeout=60)
except ray.exceptions.RayError as e:
    print("force:", type(e).__name__)


@ray.remote
class A:
    def f(self):
        return 1


a = A.remote()
try:
    ray.cancel(a.f.remote(), force=True)
except Exception as e:
    print("force on an actor call ->", type(e).__name__)
ray.shutdown()
