"""troupe.ray's actor method retries, as Ray's: max_task_retries (actor-wide, per method with
@ray.method, per call with .options()) retries a call whose actor died once the actor restarted,
in submission order; retry_exceptions (True or exception types) also retries what the method
raised; -1 retries without limit; a bad value is a TypeError at once (real processes: an
embedded cluster)."""

import os

import pytest

from troupe import ray
from troupe.ray import exceptions as rex


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, include_dashboard=False)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Log:
    """What the retried actors did, in order (it outlives their restarts)."""

    def __init__(self):
        self.entries = []

    def add(self, entry):
        self.entries.append(entry)
        return len(self.entries)

    def count(self, entry):
        return self.entries.count(entry)

    def all(self):
        return list(self.entries)


@ray.remote(num_cpus=0, max_restarts=2, max_task_retries=2)
class DiesOnce:
    """Dies in the first call named `dies` it runs (the log says whether it ran before)."""

    def __init__(self, log):
        self.log = log

    def step(self, name):
        n = ray.get(self.log.add.remote(name))
        if name == "dies" and ray.get(self.log.count.remote("dies")) == 1:
            os._exit(1)
        return name, n

    @ray.method(max_task_retries=0)
    def never_retried(self):
        ray.get(self.log.add.remote("never"))
        os._exit(1)


def test_calls_in_flight_when_the_actor_dies_run_again_after_its_restart_in_order(cluster):
    log = Log.remote()
    a = DiesOnce.remote(log)
    refs = [a.step.remote(n) for n in ("first", "dies", "after-1", "after-2")]
    results = ray.get(refs, timeout=60)
    assert [r[0] for r in results] == ["first", "dies", "after-1", "after-2"]
    entries = ray.get(log.all.remote())
    # "dies" ran twice (the first attempt killed its actor); every call after it ran once, in
    # submission order, on the restarted actor.
    assert entries == ["first", "dies", "dies", "after-1", "after-2"]


def test_a_method_that_sets_no_retries_is_not_retried(cluster):
    log = Log.remote()
    a = DiesOnce.remote(log)
    with pytest.raises(rex.ActorDiedError):
        ray.get(a.never_retried.remote(), timeout=60)
    assert ray.get(log.count.remote("never")) == 1
    # .options() of the call overrides the method's and the actor's
    log2 = Log.remote()
    b = DiesOnce.remote(log2)
    with pytest.raises(rex.ActorDiedError):
        ray.get(b.step.options(max_task_retries=0).remote("dies"), timeout=60)
    assert ray.get(log2.count.remote("dies")) == 1


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class DiesThreeTimes:
    def __init__(self, log):
        self.log = log

    def work(self):
        if ray.get(self.log.add.remote("attempt")) <= 3:
            os._exit(1)
        return "survived"


def test_minus_one_retries_without_limit(cluster):
    log = Log.remote()
    assert ray.get(DiesThreeTimes.remote(log).work.remote(), timeout=60) == "survived"
    assert ray.get(log.count.remote("attempt")) == 4


@ray.remote(num_cpus=0, max_restarts=3, max_task_retries=1)
class DiesTwice:
    def __init__(self, log):
        self.log = log

    def work(self):
        ray.get(self.log.add.remote("attempt"))
        os._exit(1)


def test_a_call_out_of_retries_fails_with_actor_died(cluster):
    log = Log.remote()
    with pytest.raises(rex.ActorDiedError):
        ray.get(DiesTwice.remote(log).work.remote(), timeout=60)
    assert ray.get(log.count.remote("attempt")) == 2  # the call and its one retry


@ray.remote(num_cpus=0, max_task_retries=3)
class Flaky:
    def __init__(self):
        self.calls = 0

    @ray.method(retry_exceptions=[KeyError])
    def only_key_errors(self, fail_with):
        self.calls += 1
        if self.calls < 3:
            raise fail_with("attempt %d" % self.calls)
        return self.calls

    def calls_so_far(self):
        return self.calls


def test_retry_exceptions_retries_only_the_exception_types_it_names(cluster):
    f = Flaky.remote()
    assert ray.get(f.only_key_errors.remote(KeyError)) == 3  # two KeyErrors retried
    g = Flaky.remote()
    with pytest.raises(ValueError, match="attempt 1"):
        ray.get(g.only_key_errors.remote(ValueError))
    assert ray.get(g.calls_so_far.remote()) == 1
    # .options(retry_exceptions=True) retries every exception
    h = Flaky.remote()
    assert ray.get(h.only_key_errors.options(retry_exceptions=True).remote(ValueError)) == 3


def test_bad_retry_options_are_type_errors_at_once(cluster):
    with pytest.raises(TypeError, match="max_task_retries"):
        Flaky.remote().only_key_errors.options(max_task_retries="twice")
    with pytest.raises(TypeError, match="retry_exceptions"):
        Flaky.remote().only_key_errors.options(retry_exceptions=[42])
    with pytest.raises(TypeError, match="max_task_retries"):
        ray.method(max_task_retries=-2)
