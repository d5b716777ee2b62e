import ray

ray.init(num_cpus=1)


@ray.remote
class Account:
    def __init__(self):
        self.balance = 10

    def withdraw(self, amount):
        if amount > self.balance:
            raise ValueError(f"insufficient funds: {self.balance} < {amount}")
        self.balance -= amount
        return self.balance


a = Account.remote()
print(ray.get(a.withdraw.remote(3)))
try:
    ray.get(a.withdraw.remote(100))
except ValueError as e:
    print(type(e).__name__, "insufficient funds: 7 < 100" in str(e))
    print("RayTaskError:", isinstance(e, ray.exceptions.RayTaskError))
print("still alive:", ray.get(a.withdraw.remote(2)))
ray.shutdown()
