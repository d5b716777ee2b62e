import ray

ray.init(num_cpus=2)


@ray.remote
def describe(items):
    kinds = sorted({type(v).__name__ for v in items.values()})
    return kinds, ray.get(items["x"]) + ray.get(items["y"])


@ray.remote
def total(refs):
    return sum(ray.get(refs))


@ray.remote
def top_level(v):
    return type(v).__name__


x, y = ray.put(20), ray.put(22)
print(ray.get(describe.remote({"x": x, "y": y})))
print(ray.get(total.remote([ray.put(i) for i in range(5)])))
print(ray.get(top_level.remote(x)), ray.get(top_level.remote([x])))
print(ray.get([[x, y]][0]) if False else ray.get([x, y]))
nested = ray.put({"ref": x})
print(ray.get(ray.get(nested)["ref"]))
ray.shutdown()
