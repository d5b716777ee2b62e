import asyncio

import ray

ray.init(num_cpus=2)


@ray.remote
def slow_square(x):
    return x * x


@ray.remote
class Gatherer:
    async def gather(self, n):
        refs = [slow_square.remote(i) for i in range(n)]
        return sum(await asyncio.gather(*refs))

    async def one(self, ref_list):
        return await ref_list[0]


g = Gatherer.remote()
print(ray.get(g.gather.remote(5)))
print(ray.get(g.one.remote([ray.put("awaited in an actor")])))


async def driver_side():
    v = await slow_square.remote(6)
    w = await asyncio.wrap_future(slow_square.remote(7).future())
    return v, w


print(asyncio.run(driver_side()))
fut = slow_square.remote(8).future()
print(type(fut).__module__, fut.result(timeout=30))
ray.shutdown()
