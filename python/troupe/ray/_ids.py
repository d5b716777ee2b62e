"""Ray's ID objects as troupe.ray hands them out: a str (the id itself, usable as a dict key
and compared as text) with Ray's ``hex()`` and ``binary()``. Imports nothing of troupe."""


class RayID(str):
    """An actor or placement-group id: ``hex()`` is the id, ``binary()`` its bytes."""

    __slots__ = ()

    def hex(self):
        return str(self)

    def binary(self):
        try:
            return bytes.fromhex(self)
        except ValueError:
            return str(self).encode()

    def __reduce__(self):
        return (RayID, (str(self),))


class ActorID(RayID):
    __slots__ = ()


class PlacementGroupID(RayID):
    __slots__ = ()
