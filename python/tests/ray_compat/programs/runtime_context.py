import ray

ray.init(num_cpus=1, namespace="ctx")
ctx = ray.get_runtime_context()
print(ctx.get_actor_id(), ctx.namespace)
job = ctx.get_job_id()
print(type(job).__name__)


@ray.remote
def task_ctx():
    c = ray.get_runtime_context()
    return c.get_actor_id(), c.get_job_id() == job, c.get_node_id() == node, c.namespace


@ray.remote
class ActorCtx:
    def ctx(self):
        c = ray.get_runtime_context()
        return type(c.get_actor_id()).__name__, c.get_job_id() == job, c.get_node_id() == node


node = ctx.get_node_id()
print(ray.get(task_ctx.remote()))
print(ray.get(ActorCtx.remote().ctx.remote()))
print(ctx.get_node_id() == ray.nodes()[0]["NodeID"])
ray.shutdown()
