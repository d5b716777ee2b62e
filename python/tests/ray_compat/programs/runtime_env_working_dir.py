import os

import ray

here = os.path.dirname(os.path.abspath(__file__))
ray.init(num_cpus=1, runtime_env={"working_dir": os.path.join(here, "_data", "workdir")})


@ray.remote
def use():
    import pkg_wd
    import wd_module

    with open("data.txt") as f:
        data = f.read().strip()
    return wd_module.VALUE, wd_module.double(21), pkg_wd.NAME, data


@ray.remote
class User:
    def use(self):
        import wd_module

        return wd_module.double(5), os.path.exists("data.txt")


print(ray.get(use.remote()))
print(ray.get(User.remote().use.remote()))
print("the driver's cwd is unchanged:", os.path.exists(os.path.join(os.getcwd(), "data.txt")))
ray.shutdown()
