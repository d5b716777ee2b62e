import asyncio

import ray

ray.init(num_cpus=2)


@ray.remote
class Blocker:
    def __init__(self):
        self.event = asyncio.Event()

    async def block(self):
        await self.event.wait()
        return "released"

    async def release(self):
        self.event.set()


b = Blocker.remote()
ref = b.block.remote()
try:
    ray.get(ref, timeout=0.2)
except ray.exceptions.GetTimeoutError as e:
    print("GetTimeoutError, also TimeoutError:", isinstance(e, TimeoutError))
    print("RayError:", isinstance(e, ray.exceptions.RayError))
try:
    ray.get([ray.put(1), ref], timeout=0)
except TimeoutError as e:
    print("list get times out:", type(e).__name__)
ray.get(b.release.remote())
print(ray.get(ref, timeout=30))
ray.shutdown()
