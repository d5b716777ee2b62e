import asyncio

import ray

ray.init(num_cpus=1)


@ray.remote
class Streamer:
    async def words(self, text):
        for word in text.split():
            await asyncio.sleep(0)
            yield word[::-1]

    async def other(self):
        return "other call"


s = Streamer.remote()
gen = s.words.remote("async generators stream too")
print(type(gen).__name__)
print([ray.get(r) for r in gen])
print(ray.get(s.other.remote()))


async def consume():
    out = []
    async for ref in s.words.remote("iterated with async for"):
        out.append(await ref)
    return out


print(asyncio.run(consume()))
ray.shutdown()
