import ray

ray.init(num_cpus=3, num_gpus=2, resources={"accel_tag": 4})


def shown(d):
    """The resources a program reads (memory and the object store vary by machine)."""
    keep = {k: v for k, v in d.items() if not k.startswith("node:")
            and k not in ("memory", "object_store_memory")}
    return sorted(keep.items())


nodes = ray.nodes()
print(len(nodes))
n = nodes[0]
print(n["Alive"], n["alive"] if "alive" in n else None, type(n["NodeID"]).__name__, len(n["NodeID"]))
print(sorted(k for k in ("NodeID", "Alive", "NodeManagerAddress", "Resources") if k in n))
print(shown(n["Resources"]))
print(f"node:{n['NodeManagerAddress']}" in n["Resources"])
print(n["NodeID"] == ray.get_runtime_context().get_node_id())
print(shown(ray.cluster_resources()))
print(all(k in ray.cluster_resources() for k in ("memory", "object_store_memory")))
print(n["NodeManagerAddress"] == ray.util.get_node_ip_address())
ray.shutdown()
