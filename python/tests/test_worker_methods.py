"""What a Python worker tells the driver about its class: troupe._worker.public_methods and the
parameter names it reads from code objects, against inspect.signature (the specification)."""

import functools
import inspect

from troupe import _worker


def plain(a, b=2):
    pass


def every_kind(a, b, /, c, *args, d, e=5, **kwargs):
    pass


def star_only(*, key):
    pass


def kwargs_only(**options):
    pass


def varargs_and_kwargs(*items, **options):
    pass


@functools.wraps(every_kind)
def wrapper(*args, **kwargs):
    return every_kind(*args, **kwargs)


def test_parameter_names_are_inspect_signatures():
    for fn in (plain, every_kind, star_only, kwargs_only, varargs_and_kwargs, wrapper,
               functools.partial(plain, 1), len, lambda x, *y: None):
        assert _worker.parameter_names(fn) == list(inspect.signature(fn).parameters), fn


class Base:
    def inherited(self, x):
        return x


class Methods(Base):
    value = 3  # not callable: not a method

    def add(self, a, b=1):
        return a + b

    def gen(self, n):
        yield from range(n)

    async def coro(self, *, delay):
        return delay

    @staticmethod
    def static(p, q):
        return p + q

    @classmethod
    def build(cls):
        return cls()

    @property
    def size(self):
        return 1

    def configure_worker(self, info):
        pass

    def _private(self):
        pass


def test_public_methods_lists_what_a_driver_may_call():
    # Worked out from the class above: sorted by name, self dropped except for the staticmethod.
    assert _worker.public_methods(Methods) == [
        ("add", ["a", "b"], False, False),
        ("coro", ["delay"], False, True),
        ("gen", ["n"], True, False),
        ("inherited", ["x"], False, False),
        ("static", ["p", "q"], False, False),
    ]
