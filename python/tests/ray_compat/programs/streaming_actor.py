import ray

ray.init(num_cpus=1)


@ray.remote
class Tokenizer:
    def __init__(self):
        self.calls = 0

    def tokens(self, text):
        self.calls += 1
        for word in text.split():
            yield word.upper()

    @ray.method(num_returns="streaming")
    def explicit(self, n):
        for i in range(n):
            yield i

    async def atokens(self, text):
        for word in text.split():
            yield word[::-1]

    def calls_(self):
        return self.calls


t = Tokenizer.remote()
print([ray.get(r) for r in t.tokens.remote("the quick fox")])
print([ray.get(r) for r in t.explicit.remote(3)])
print([ray.get(r) for r in t.tokens.options(num_returns="streaming").remote("a b")])
print(ray.get(t.calls_.remote()))
ray.shutdown()
