"""PlacementGroup, the handle of a placement group (re-exported by ``ray.util``): its id,
bundles and strategy; ``ready()`` and ``wait()`` ask this process's API."""

from troupe.ray import _current, _ids

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroup:
    """A placement group: ``ready()`` is an ObjectRef that resolves once every bundle is
    reserved; ``wait(timeout)`` blocks for it. Picklable (it can be passed to actors)."""

    def __init__(self, pg_id, bundles, strategy="PACK", name=""):
        self.id = _ids.PlacementGroupID(pg_id)
        self._bundles = bundles
        self.strategy = strategy
        self.name = name

    @property
    def bundle_specs(self):
        """The bundles as asked, e.g. [{"CPU": 1, "GPU": 1}, ...]."""
        return [dict(b) for b in self._bundles]

    @property
    def bundle_count(self):
        return len(self._bundles)

    def ready(self):
        return _current.api().pg_ready(self.id)

    def wait(self, timeout_seconds=30):
        """Whether the group is placed within `timeout_seconds`."""
        ref = self.ready()
        ready, _ = _current.api().wait([ref], 1, timeout_seconds)
        return bool(ready)

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"PlacementGroup(id={self.id}, bundles={self._bundles}, strategy={self.strategy})"
