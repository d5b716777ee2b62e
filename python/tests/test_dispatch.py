"""Every dispatch mode on 1-D, 2-D and 3-D shardings, from Python.

Expected values are worked out by hand from the reference's semantics: on a free axis (neither
sharded nor replicated) only index 0 is called (all of them with make_dummy_calls_to_free_axes,
the others getting None), along output_is_replicated only index 0 is returned from, and
run_rank_0_only_axes calls only index 0 of those axes.
"""

import pytest

import troupe

T = 60  # seconds: the deadline of every wait


def who(results):
    return [(r["rank"], r["x"]) for r in results]


@pytest.fixture(scope="module")
def g1(vc):
    """1-D: 2 workers, axis dp."""
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Rank"), workers_per_node=1,
                           name_prefix="d1", sharding_annotations=troupe.NamedSharding([0, 1], ["dp"]))
    yield g
    g.shutdown()


@pytest.fixture(scope="module")
def g2(vc):
    """2-D: 4 workers, [[0, 1], [2, 3]] over (dp, tp): rank r sits at dp=r//2, tp=r%2."""
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Rank", tag="two"), workers_per_node=2,
                           name_prefix="d2",
                           sharding_annotations=troupe.NamedSharding([[0, 1], [2, 3]], ["dp", "tp"]))
    yield g
    g.shutdown()


@pytest.fixture(scope="module")
def g3(vc):
    """3-D: 8 workers over (pp, dp, tp): rank r sits at pp=r//4, dp=(r//2)%2, tp=r%2."""
    layout = [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder(troupe_workers_rank()), name_prefix="d3",
                           sharding_annotations=troupe.NamedSharding(layout, ["pp", "dp", "tp"]))
    yield g
    g.shutdown()


def troupe_workers_rank():
    import workers

    return workers.Rank  # a class object works as well as its name


def test_layout(g2):
    assert [m["rank"] for m in g2.worker_metadata] == [0, 1, 2, 3]
    assert g2.dp_size == 4  # untied workers each lead one shard
    assert len(g2.workers) == 4


def test_single_worker_single_data(g2):
    assert g2.run_single_worker_single_data("who", 3, x=9).result(T) == \
        {"rank": 3, "x": 9, "y": None, "c": None}


def test_all_workers_single_data(g2):
    f = g2.run_all_workers_single_data("who", x=5)
    assert (f.called_workers, f.return_from_workers) == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert who(g2.get_all_worker_results(f)) == [(0, 5), (1, 5), (2, 5), (3, 5)]
    f = g2.run_all_workers_single_data("who", x=5, run_rank_0_only_axes=["tp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 2], [0, 2])
    f = g2.run_all_workers_single_data("who", x=5, run_rank_0_only_axes=["dp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 1], [0, 1])
    f = g2.run_all_workers_single_data("who", x=5, run_rank_0_only_axes=["dp", "tp"])
    assert who(f.result(T)) == [(0, 5)]


def test_all_workers_multiple_data(g2):
    f = g2.run_all_workers_multiple_data("who", x=[10, 11, 12, 13], common_kwargs={"c": 1})
    assert (f.called_workers, f.return_from_workers) == ([0, 1, 2, 3], [0, 1, 2, 3])
    res = g2.get_all_worker_results(f)
    assert who(res) == [(0, 10), (1, 11), (2, 12), (3, 13)]
    assert [r["c"] for r in res] == [1, 1, 1, 1]
    f = g2.run_all_workers_multiple_data("who", x=(20, 22), run_rank_0_only_axes=["tp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 2], [0, 2])
    assert who(f.result(T)) == [(0, 20), (2, 22)]


def test_sharded_dp_replicated_tp(g2):
    f = g2.run_all_workers_sharded_data("who", x=["a", "b"], in_sharded_axes=["dp"],
                                        replicate_on_axes=["tp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert who(f.result(T)) == [(0, "a"), (1, "a"), (2, "b"), (3, "b")]
    f = g2.run_all_workers_sharded_data("who", x=["a", "b"], in_sharded_axes=["dp"],
                                        replicate_on_axes=["tp"], output_is_replicated=["tp"],
                                        common_kwargs={"c": 3})
    assert (f.called_workers, f.return_from_workers) == ([0, 1, 2, 3], [0, 2])
    assert [(r["rank"], r["x"], r["c"]) for r in f.result(T)] == [(0, "a", 3), (2, "b", 3)]


def test_sharded_free_axis_and_dummy_calls(g2):
    f = g2.run_all_workers_sharded_data("who", x=["a", "b"], in_sharded_axes=["dp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 2], [0, 2])
    assert who(f.result(T)) == [(0, "a"), (2, "b")]
    f = g2.run_all_workers_sharded_data("who", x=["a", "b"], in_sharded_axes=["dp"],
                                        make_dummy_calls_to_free_axes=True)
    assert (f.called_workers, f.return_from_workers) == ([0, 1, 2, 3], [0, 2])
    assert [fu.result(T)["x"] for fu in f.futures] == ["a", None, "b", None]


def test_sharded_on_both_axes_positional(g2):
    f = g2.run_all_workers_sharded_data("pos", [["a", "b"], ["c", "d"]],
                                        in_sharded_axes=["dp", "tp"], common_kwargs={"c": 0})
    assert (f.called_workers, f.return_from_workers) == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert [(r["rank"], r["args"]) for r in f.result(T)] == \
        [(0, ["a"]), (1, ["b"]), (2, ["c"]), (3, ["d"])]


def test_1d(g1):
    f = g1.run_all_workers_sharded_data("who", x=[7, 8], in_sharded_axes=["dp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 1], [0, 1])
    assert who(f.result(T)) == [(0, 7), (1, 8)]
    f = g1.run_all_workers_sharded_data("who", x=1, replicate_on_axes=["dp"],
                                        output_is_replicated=["dp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 1], [0])
    assert who(f.result(T)) == [(0, 1)]
    f = g1.run_all_workers_single_data("who", x=2, run_rank_0_only_axes=["dp"])
    assert who(f.result(T)) == [(0, 2)]


def test_3d_free_pp(g3):
    f = g3.run_all_workers_sharded_data("who", x=["a", "b"], in_sharded_axes=["dp"],
                                        replicate_on_axes=["tp"], output_is_replicated=["tp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 1, 2, 3], [0, 2])
    assert who(f.result(T)) == [(0, "a"), (2, "b")]
    f = g3.run_all_workers_sharded_data("who", x=["a", "b"], in_sharded_axes=["dp"],
                                        replicate_on_axes=["tp"], output_is_replicated=["tp"],
                                        make_dummy_calls_to_free_axes=True)
    assert (f.called_workers, f.return_from_workers) == (list(range(8)), [0, 2])
    assert [fu.result(T)["x"] for fu in f.futures] == ["a", "a", "b", "b", None, None, None, None]


def test_3d_sharded_pp_dp(g3):
    x = [["p0d0", "p0d1"], ["p1d0", "p1d1"]]
    f = g3.run_all_workers_sharded_data("who", x=x, in_sharded_axes=["pp", "dp"],
                                        replicate_on_axes=["tp"], output_is_replicated=["tp"])
    assert (f.called_workers, f.return_from_workers) == (list(range(8)), [0, 2, 4, 6])
    assert who(f.result(T)) == [(0, "p0d0"), (2, "p0d1"), (4, "p1d0"), (6, "p1d1")]
    # One element per called worker: pp=0 and tp=0 leave ranks 0 and 2.
    f = g3.run_all_workers_multiple_data("who", x=["w0", "w2"], run_rank_0_only_axes=["pp", "tp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 2], [0, 2])
    assert who(f.result(T)) == [(0, "w0"), (2, "w2")]


def test_slices_are_meshes_of_their_own(g3):
    # pp=1: ranks 4..7 as a (dp, tp) mesh whose own indices are 0..3.
    s = g3.slice(pp=1)
    assert s.group_worker_indices == [4, 5, 6, 7]
    assert s.sharding == troupe.NamedSharding([[0, 1], [2, 3]], ["dp", "tp"])
    f = s.run_all_workers_sharded_data("who", x=["a", "b"], in_sharded_axes=["dp"],
                                       replicate_on_axes=["tp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert who(s.get_all_worker_results(f)) == [(4, "a"), (5, "a"), (6, "b"), (7, "b")]
    # tp free on the slice: slice workers 0 and 2, i.e. ranks 4 and 6.
    f = s.run_all_workers_sharded_data("who", x=["a", "b"], in_sharded_axes=["dp"])
    assert (f.called_workers, f.return_from_workers) == ([0, 2], [0, 2])
    assert who(f.result(T)) == [(4, "a"), (6, "b")]
    # A slice of the slice: tp=1 leaves ranks 5 and 7 on a dp axis.
    t = s.slice(tp=1)
    assert t.group_worker_indices == [5, 7]
    assert t.sharding == troupe.NamedSharding([0, 1], ["dp"])
    assert who(t.run_all_workers_single_data("who", x=3).result(T)) == [(5, 3), (7, 3)]
    assert who(t.run_all_workers_multiple_data("who", x=["p", "q"]).result(T)) == [(5, "p"),
                                                                                  (7, "q")]
    assert t.run_single_worker_single_data("who", 1, x=9).result(T)["rank"] == 7
    with pytest.raises(troupe.InvalidArgumentError, match="out of range"):
        s.slice(dp=2)
    with pytest.raises(troupe.InvalidArgumentError, match="not in the sharding"):
        t.run_all_workers_single_data("who", x=1, run_rank_0_only_axes=["tp"])


def test_bad_dispatch_is_checked_before_any_call(g2):
    with pytest.raises(troupe.InvalidArgumentError, match="nope"):
        g2.run_all_workers_sharded_data("who", x=[1, 2], in_sharded_axes=["nope"])
    with pytest.raises(troupe.InvalidArgumentError):
        g2.run_all_workers_multiple_data("who", x=[1, 2, 3])  # 3 values for 4 workers


def test_futures_gather_and_asyncio(g2):
    import asyncio

    fs = [g2.run_single_worker_single_data("who", i, x=i) for i in range(4)]
    assert [r["x"] for r in troupe.gather(fs, timeout=T)] == [0, 1, 2, 3]

    async def main():
        one = await g2.run_single_worker_single_data("who", 1, x="async")
        many = await g2.run_all_workers_single_data("who", x="m", run_rank_0_only_axes=["tp"])
        return one, many

    one, many = asyncio.run(asyncio.wait_for(main(), T))
    assert one["x"] == "async"
    assert who(many) == [(0, "m"), (2, "m")]


def test_group_streams(g2):
    streams = g2.run_all_workers_single_data_stream("items", 3, run_rank_0_only_axes=["tp"])
    assert len(streams) == 2  # tp=0: workers 0 and 2
    assert [list(s) for s in streams] == [[0, 1, 2], [20, 21, 22]]
    assert [s.done().result(T) for s in streams] == [0, 2]
