"""Resource amounts in Ray's terms: what each placement-group bundle has and has left, GPU ids
included (a Pool), the nodes (troupe hosts, whose amounts the head books), and what an actor or
task asks for.

Not thread-safe: the runtime calls it on its dispatcher thread (or under its lock).
"""

import hashlib

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


def labels_of(custom):
    """Host labels that give a host the custom resources `custom` ({name: amount}), as
    `troupe start --resources` does (ray.init(resources=) for an embedded cluster's first
    host)."""
    return {f"{RESOURCE_LABEL}{k}": repr(float(v)) for k, v in (custom or {}).items()}


class Node:
    """A troupe host as Ray names it. What it has and has free is the head's
    (troupe.Cluster.host_resources)."""

    def __init__(self, index, name, address):
        self.index = index
        self.name = name
        self.address = address
        self.node_id = node_id_of(address, name)


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


def feasible_somewhere(hosts, request):
    """Whether some live host of `hosts` (troupe.Cluster.host_resources) could ever hold
    `request`, by its totals."""
    for h in hosts:
        if not h["alive"]:
            continue
        total = Pool(h["total"], {g: 1.0 for g in h["gpus_free"]})
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
