"""The driver's resource ledger: what each node (troupe host) and each placement-group bundle
has and has left, GPU ids included, and where bundles, actors and tasks fit.

Not thread-safe: the runtime calls it on its dispatcher thread (or under its lock).
"""

import hashlib
import os

EPS = 1e-9


def node_id_of(address, name):
    return hashlib.sha1(f"{address}/{name}".encode()).hexdigest()[:28] * 2


class Pool:
    """Amounts of named resources ("CPU", "GPU", custom) plus the free share of each GPU id."""

    def __init__(self, amounts, gpu_shares):
        self.total = dict(amounts)
        self.avail = dict(amounts)
        self.gpu_free = dict(gpu_shares)  # gpu id -> free share (1.0 = a whole GPU)

    def _gpus_for(self, g):
        if g <= EPS:
            return []
        if g < 1:
            for gid, free in sorted(self.gpu_free.items()):
                if free + EPS >= g:
                    return [gid]
            return None
        whole = [gid for gid, free in sorted(self.gpu_free.items()) if free >= 1 - EPS]
        return whole[:int(round(g))] if len(whole) >= round(g) else None

    def fits(self, request):
        for k, v in request.items():
            if v > EPS and self.avail.get(k, 0) + EPS < v:
                return False
        return self._gpus_for(request.get("GPU", 0)) is not None

    def take(self, request):
        """Takes `request`; returns the GPU ids given (a fractional GPU shares one id), or None
        when it does not fit (nothing taken)."""
        if not self.fits(request):
            return None
        gpus = self._gpus_for(request.get("GPU", 0))
        self.take_over(request, gpus)
        return gpus

    def take_over(self, request, gpus):
        """Takes `request` with its GPU ids `gpus`, even when it leaves less than nothing (a
        task back from a nested ray.get)."""
        g = request.get("GPU", 0)
        share = g if g < 1 else 1.0
        for gid in gpus:
            self.gpu_free[gid] -= share
        for k, v in request.items():
            self.avail[k] = self.avail.get(k, 0) - v

    def give(self, request, gpus):
        g = request.get("GPU", 0)
        share = g if g < 1 else 1.0
        for gid in gpus:
            self.gpu_free[gid] = min(1.0, self.gpu_free[gid] + share)
        for k, v in request.items():
            self.avail[k] = self.avail.get(k, 0) + v


RESOURCE_LABEL = "resource:"  # troupe::kResourceLabelPrefix (include/troupe/cluster.h)


def custom_of(host, extra):
    """A host's custom resources: its labels "resource:NAME" = AMOUNT (`troupe start
    --resources`), plus `extra` (ray.init(resources=) for an embedded cluster's first host)."""
    out = {k[len(RESOURCE_LABEL):]: float(v) for k, v in (host.get("labels") or {}).items()
           if k.startswith(RESOURCE_LABEL)}
    out.update(extra or {})
    return out


class Node:
    def __init__(self, index, name, address, cpus, gpu_ids, custom):
        self.index = index
        self.name = name
        self.address = address
        self.node_id = node_id_of(address, name)
        self.alive = True
        amounts = {"CPU": float(cpus), "GPU": float(len(gpu_ids)), f"node:{address}": 1.0,
                   "memory": default_memory(), "object_store_memory": default_memory(0.3)}
        amounts.update({k: float(v) for k, v in (custom or {}).items()})
        self.pool = Pool(amounts, {g: 1.0 for g in gpu_ids})


def default_memory(share=0.7):
    """A node's logical "memory" resource in bytes, as Ray sizes it: what is available on this
    machine less Ray's default object store share (30%, the "object_store_memory" Ray reports:
    share=0.3). A host's `troupe start --resources memory=BYTES` overrides it. Requests
    (options(memory=)) are only accounted, never enforced."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(int(int(line.split()[1]) * 1024 * share))
    except OSError:
        pass
    return float(int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * share))


class Bundle:
    """A reserved bundle: its request, node, the GPU ids it holds and its own pool."""

    def __init__(self, index, request, node, gpus):
        self.index = index
        self.request = request
        self.node = node
        self.gpus = gpus
        amounts = {k: v for k, v in request.items()}
        g = request.get("GPU", 0)
        shares = {gid: (g if g < 1 else 1.0) for gid in gpus}
        self.pool = Pool(amounts, shares)


def place_bundles(nodes, requests, strategy):
    """Node indices for each bundle request under `strategy`, or None when they do not fit
    now. Takes nothing (the caller takes on success)."""
    live = [n for n in nodes if n.alive]
    sim = {n.index: _SimPool(n.pool) for n in live}

    def fits(n, r):
        return sim[n.index].take(r)

    if strategy in ("STRICT_PACK", "PACK"):
        for n in live:
            trial = _SimPool(n.pool)
            if all(trial.take(r) for r in requests):
                return [n.index] * len(requests)
        if strategy == "STRICT_PACK":
            return None
        out = []
        for r in requests:
            n = next((n for n in live if fits(n, r)), None)
            if n is None:
                return None
            out.append(n.index)
        return out
    if strategy in ("SPREAD", "STRICT_SPREAD"):
        out, used = [], set()
        for r in requests:
            n = next((n for n in live if n.index not in used and fits(n, r)), None)
            if n is None and strategy == "SPREAD":
                n = next((n for n in live if fits(n, r)), None)
            if n is None:
                return None
            used.add(n.index)
            out.append(n.index)
        return out
    raise ValueError(f"placement strategy {strategy!r}: use PACK, SPREAD, STRICT_PACK or "
                     "STRICT_SPREAD")


class _SimPool:
    """A copy of a pool to try placements on."""

    def __init__(self, pool):
        self.p = Pool({}, {})
        self.p.total, self.p.avail, self.p.gpu_free = (dict(pool.total), dict(pool.avail),
                                                       dict(pool.gpu_free))

    def take(self, r):
        return self.p.take(r) is not None


def feasible_somewhere(nodes, request):
    """Whether some node could ever hold `request` (by its totals)."""
    for n in nodes:
        if not n.alive:
            continue
        total = Pool(n.pool.total, {g: 1.0 for g in n.pool.gpu_free})
        if total.fits(request):
            return True
    return False


def request_of(options, actor):
    """The resources an actor (`actor`) or a task with these options asks for; an actor holds no
    CPU unless it names num_cpus, a task one (as Ray's)."""
    cpus = options.get("num_cpus")
    out = {"CPU": float(cpus if cpus is not None else (0 if actor else 1)),
           "GPU": float(options.get("num_gpus") or 0)}
    if options.get("memory"):
        out["memory"] = float(options["memory"])  # a logical resource, as Ray's
    for k, v in (options.get("resources") or {}).items():
        out[k] = float(v)
    return out
