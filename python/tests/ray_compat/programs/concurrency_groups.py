import asyncio

import ray

ray.init(num_cpus=1)


@ray.remote(concurrency_groups={"io": 2, "compute": 1})
class Service:
    def __init__(self):
        self.inside = 0
        self.both_in = asyncio.Event()
        self.log = []

    @ray.method(concurrency_group="io")
    async def fetch(self, i):
        self.inside += 1
        if self.inside == 2:
            self.both_in.set()
        await self.both_in.wait()  # needs the group's two slots at once
        return f"fetched {i}"

    @ray.method(concurrency_group="compute")
    async def compute(self, i):
        self.log.append(("start", i))
        await asyncio.sleep(0.01)
        self.log.append(("end", i))
        return i

    async def default(self):
        return "default group"

    async def history(self):
        return self.log


s = Service.remote()
print(ray.get([s.fetch.remote(1), s.fetch.remote(2)], timeout=60))
print(ray.get([s.compute.remote(i) for i in range(3)]))
print(ray.get(s.history.remote()))
print(ray.get(s.default.remote()))
print(ray.get(s.default.options(concurrency_group="io").remote()))
ray.shutdown()
