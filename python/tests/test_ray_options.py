"""troupe.ray options, as Ray checks them: an unknown option name is a ValueError at decoration
and .options(), a value of the wrong type a TypeError there; an option troupe.ray cannot honour
is accepted there (a module using it imports) and refused at .remote() (actor creation, task
submission, method call), naming it and what to use instead. `memory` is a logical resource, as
in Ray: accounted in cluster_resources()/available_resources(). Real processes."""

import importlib
import sys
import textwrap

import pytest

from troupe import ray
from troupe.ray import exceptions as rex

# Every option (and runtime_env key) that troupe.ray refuses, with a value that uses it, and
# a word the refusal must name (the feature) besides its "use ..." advice.
REFUSED_ACTOR = {
    "accelerator_type='A100'": "accelerator_type",
    "object_store_memory=10**6": "object_store_memory",
    "label_selector={'zone': 'a'}": "label_selector",
    "fallback_strategy=[{'label_selector': {'zone': 'b'}}]": "fallback_strategy",
    "_labels={'k': 'v'}": "_labels",
    "placement_group_bundle_index=0": "placement_group_bundle_index",
    "max_pending_calls=4": "max_pending_calls",
    "allow_out_of_order_execution=True": "allow_out_of_order_execution",
    "enable_tensor_transport=True": "enable_tensor_transport",
    "runtime_env={'pip': ['requests']}": "pip",
    "runtime_env={'conda': 'env'}": "conda",
    "runtime_env={'container': {'image': 'x'}}": "container",
    "runtime_env={'working_dir': 's3://bucket/dir.zip'}": "working_dir",
}
REFUSED_TASK = {
    "accelerator_type='A100'": "accelerator_type",
    "max_calls=1": "max_calls",
    "runtime_env={'uv': ['x']}": "uv",
    "runtime_env={'nsight': 'default'}": "nsight",
    "runtime_env={'working_dir': '.'}": "working_dir",
    "_generator_backpressure_num_objects=2": "_generator_backpressure_num_objects",
}
MODULE = """
from troupe import ray

{actors}
{tasks}

@ray.remote(num_cpus=0)
class WithMethods:
    @ray.method(tensor_transport="nccl")
    def nccl(self):
        return 1

    def plain(self):
        return 2

@ray.remote(num_returns="dynamic")
def dynamic():
    yield 1
"""


@pytest.fixture(scope="module")
def refused_module(tmp_path_factory):
    d = tmp_path_factory.mktemp("refused")
    actors = "\n".join(f"@ray.remote({opt})\nclass A{i}:\n    def f(self):\n        return 1\n"
                       for i, opt in enumerate(REFUSED_ACTOR))
    tasks = "\n".join(f"@ray.remote({opt})\ndef t{i}():\n    return 1\n"
                      for i, opt in enumerate(REFUSED_TASK))
    (d / "refused_options_mod.py").write_text(textwrap.dedent(MODULE).format(actors=actors,
                                                                           tasks=tasks))
    sys.path.insert(0, str(d))
    try:
        yield importlib.import_module("refused_options_mod")  # imports: nothing refused yet
    finally:
        sys.path.remove(str(d))


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def test_a_module_decorating_with_refused_options_imports(refused_module):
    assert len([n for n in dir(refused_module) if n.startswith("A")]) == len(REFUSED_ACTOR)
    assert len([n for n in dir(refused_module) if n.startswith("t")]) == len(REFUSED_TASK)
    # .options() with them is accepted too
    refused_module.A0.options(accelerator_type="H100")
    refused_module.t0.options(accelerator_type="H100")


@pytest.mark.parametrize("i,opt", list(enumerate(REFUSED_ACTOR)))
def test_actor_creation_refuses_naming_the_option(cluster, refused_module, i, opt):
    with pytest.raises(rex.NotSupportedError) as info:
        getattr(refused_module, f"A{i}").remote()
    msg = str(info.value)
    assert REFUSED_ACTOR[opt] in msg and "troupe.ray" in msg
    assert "use" in msg or "supports" in msg or "catch" in msg  # what to do instead


@pytest.mark.parametrize("i,opt", list(enumerate(REFUSED_TASK)))
def test_task_submission_refuses_naming_the_option(cluster, refused_module, i, opt):
    with pytest.raises(rex.NotSupportedError) as info:
        getattr(refused_module, f"t{i}").remote()
    msg = str(info.value)
    assert REFUSED_TASK[opt] in msg and "troupe.ray" in msg


def test_method_options_are_refused_at_the_call(cluster, refused_module):
    h = refused_module.WithMethods.remote()
    assert ray.get(h.plain.remote(), timeout=60) == 2
    with pytest.raises(rex.NotSupportedError, match="tensor_transport"):
        h.nccl.remote()
    with pytest.raises(rex.NotSupportedError, match="tensor_transport"):
        h.plain.options(tensor_transport="nccl").remote()
    with pytest.raises(rex.NotSupportedError, match="dynamic"):
        refused_module.dynamic.remote()
    ray.kill(h)


def test_an_option_refused_by_the_decorator_can_be_cleared_by_options(cluster, refused_module):
    a = refused_module.A0.options(accelerator_type=None).remote()
    assert ray.get(a.f.remote(), timeout=60) == 1
    ray.kill(a)


def test_unknown_option_names_fail_at_once_as_in_ray():
    def f():
        return 1

    class C:
        pass

    with pytest.raises(ValueError, match="frobnicate"):
        ray.remote(frobnicate=1)(f)
    with pytest.raises(ValueError, match="frobnicate"):
        ray.remote(frobnicate=1)(C)
    with pytest.raises(ValueError, match="frobnicate"):
        ray.remote(f).options(frobnicate=1)
    with pytest.raises(ValueError, match="lifetime"):  # an actor option on a task
        ray.remote(f).options(lifetime="detached")
    with pytest.raises(ValueError, match="bogus"):
        ray.method(bogus=1)
    # values of the wrong type or range: at decoration, as Ray does
    with pytest.raises(TypeError, match="num_cpus"):
        ray.remote(num_cpus="2")(f)
    with pytest.raises(ValueError, match="num_cpus"):
        ray.remote(num_cpus=-1)(f)
    with pytest.raises(TypeError, match="memory"):
        ray.remote(memory="1GB")(C)
    with pytest.raises(TypeError, match="runtime_env"):
        ray.remote(runtime_env=["pip"])(C)
    with pytest.raises(TypeError, match="env_vars"):
        ray.remote(runtime_env={"env_vars": {"A": 1}})(C)


def test_memory_is_a_logical_resource_accounted_as_in_ray(cluster):
    total = ray.cluster_resources()["memory"]
    assert total > 0
    assert ray.cluster_resources()["object_store_memory"] > 0  # reported, as Ray does
    before = ray.available_resources()["memory"]

    @ray.remote(memory=10**8, num_cpus=0)
    class Holder:
        def ping(self):
            return "pong"

    h = Holder.remote()
    assert ray.get(h.ping.remote(), timeout=60) == "pong"  # it is placed: its memory is taken
    assert ray.available_resources()["memory"] == pytest.approx(before - 10**8)

    @ray.remote(memory=10**8)
    def uses_memory():
        return ray.available_resources()["memory"]

    assert ray.get(uses_memory.remote(), timeout=60) == pytest.approx(before - 2 * 10**8)
    ray.kill(h)
