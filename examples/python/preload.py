import troupe

# Each host's Python fork server imports numpy once, before any worker: Python workers are forked
# from it and find numpy imported (a class module's `import numpy` costs nothing).
with troupe.Cluster(num_hosts=1, python_preload=["numpy"], log_to_driver=False) as cluster:
    workers = [cluster.start_worker("mypkg.policy.Policy", lr=0.5) for _ in range(4)]
    print([w.call("train", [1.0, 2.0], step=1).result(timeout=60) for w in workers])
