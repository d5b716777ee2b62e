import ray

ray.init(num_cpus=1)


@ray.remote
def f():
    return 1


@ray.remote
class A:
    def m(self):
        return 1


for what, fn in [("call a task", lambda: f()), ("instantiate an actor", lambda: A()),
                 ("call a method", lambda: A.remote().m()),
                 ("missing method", lambda: A.remote().nope)]:
    try:
        fn()
        print(what, "ok")
    except Exception as e:
        print(what, "->", type(e).__name__)
try:
    ray.init(num_cpus=1)
except RuntimeError as e:
    print("init twice ->", type(e).__name__, "ignore_reinit_error" in str(e))
print(ray.init(ignore_reinit_error=True) is not None)
print(ray.is_initialized())
ray.shutdown()
print(ray.is_initialized())
