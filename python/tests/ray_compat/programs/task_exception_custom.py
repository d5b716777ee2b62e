import ray

ray.init(num_cpus=1)


class QuotaError(Exception):
    def __init__(self, user, limit):
        super().__init__(f"{user} is over {limit}")
        self.user = user
        self.limit = limit


@ray.remote
def charge(user):
    raise QuotaError(user, 3)


try:
    ray.get(charge.remote("ada"))
except QuotaError as e:
    print(type(e).__name__, e.user, e.limit, "ada is over 3" in str(e))
    print(isinstance(e, ray.exceptions.RayTaskError))

try:
    ray.get(charge.remote("bob"))
except ray.exceptions.RayTaskError as e:
    print("as RayTaskError:", type(e.cause).__name__, e.cause.user)
ray.shutdown()
