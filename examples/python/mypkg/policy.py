# mypkg/policy.py
class Policy:
    def __init__(self, lr): self.lr = lr
    def train(self, batch, step): return sum(batch) * self.lr + step
