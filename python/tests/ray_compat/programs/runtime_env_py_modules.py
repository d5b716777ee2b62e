import os

import ray

here = os.path.dirname(os.path.abspath(__file__))
helpers = os.path.join(here, "_data", "pymod", "shared_helpers")

# A local directory in py_modules is uploaded for the whole job (Ray refuses one in a task's
# or actor's own runtime_env).
ray.init(num_cpus=1, runtime_env={"py_modules": [helpers]})


@ray.remote
def greet(name):
    import shared_helpers

    return shared_helpers.greet(name)


print(ray.get(greet.remote("ada")))


@ray.remote
class Greeter:
    def greet(self):
        import shared_helpers

        return shared_helpers.greet("actor")


print(ray.get(Greeter.remote().greet.remote()))
ray.shutdown()
