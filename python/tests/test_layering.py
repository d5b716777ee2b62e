"""The layers of the Python package (ARCHITECTURE.md, "The Python package"), checked on the
source tree: every module of python/troupe has a layer, no import (module-level or inside a
function) goes to a higher layer, no two modules import each other through any path, and every
function-level import says on its line why it is not at the top. Importing a.b.c runs the
__init__ of a.b first, so such an import is an edge to the package a.b too (unless the importer
is inside it). The same file checks the one C++ rule the build's layer probes do not cover:
sources of the layers below the controller, tests included, use only the public headers that
those layers implement.

The checker runs on planted packages too, so that it is shown to fail on a cycle, an upward
import, an import through a package's __init__, and a function-level import without a reason.
"""

import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_ROOT = os.path.join(REPO, "python")

# Lowest first. A module may import its own layer's modules and lower layers' (never in a
# circle); "troupe._core" is the pybind11 extension (python/src/).
LAYERS = [
    ("core: extension", ["troupe._core"]),
    ("core: errors, futures, worker runtime", ["troupe._errors", "troupe._futures",
                                               "troupe._worker"]),
    ("core: clusters and groups", ["troupe._cluster", "troupe._virtual_cluster",
                                   "troupe._group"]),
    ("core: package", ["troupe"]),
    ("ray: base", ["troupe.ray.exceptions", "troupe.ray._ids", "troupe.ray._serial",
                   "troupe.ray._context", "troupe.ray._current", "troupe.ray._resources",
                   "troupe.ray._strategies", "troupe.ray._runtime_env", "troupe.ray._options"]),
    ("ray: references", ["troupe.ray._cells", "troupe.ray._objects", "troupe.ray._handles",
                         "troupe.ray._placement"]),
    ("ray: driver runtime", ["troupe.ray._actors", "troupe.ray._tasks", "troupe.ray._named",
                             "troupe.ray._proxy", "troupe.ray._ledger",
                             "troupe.ray._actor_directory", "troupe.ray._runtime"]),
    ("ray: client", ["troupe.ray._api", "troupe.ray._session"]),
    ("ray: Ray's surface", ["troupe.ray._public", "troupe.ray.actor", "troupe.ray.remote_function",
                            "troupe.ray.util", "troupe.ray.util.actor_pool",
                            "troupe.ray.util.placement_group",
                            "troupe.ray.util.scheduling_strategies", "troupe.ray.util.queue",
                            "troupe.ray.util.state", "troupe.ray._private",
                            "troupe.ray._private.services", "troupe.ray._private.state",
                            "troupe.ray.experimental", "troupe.ray.experimental.state",
                            "troupe.ray.experimental.state.api", "troupe.ray"]),
    ("entry points", ["troupe.ray._host", "troupe._fork_server", "troupe._role"]),
]
EXTENSIONS = {"troupe._core"}


def modules_of(root):
    """{module name: (path, its package)} of every .py file under root/troupe (or root/<top>
    for a planted package)."""
    out = {}
    for top in sorted(os.listdir(root)):
        if not os.path.isfile(os.path.join(root, top, "__init__.py")):
            continue
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                path = os.path.join(d, f)
                name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[:-len(".__init__")]
                    package = name
                else:
                    package = name.rsplit(".", 1)[0]
                out[name] = (path, package)
    return out


def _inside_function(tree):
    """ids of the nodes that lie inside a function body."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for sub in ast.walk(node):
                if sub is not node:
                    inside.add(id(sub))
    return inside


def _targets(node, package, known):
    """The module names an import node reaches (the deepest known module of each name)."""

    def deepest(name):
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    if isinstance(node, ast.Import):
        return [deepest(a.name) for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")
            base = base[:len(base) - (node.level - 1)]
            full = ".".join(base + ([node.module] if node.module else []))
        else:
            full = node.module or ""
        return [deepest(f"{full}.{a.name}") if f"{full}.{a.name}" in known else deepest(full)
                for a in node.names]
    # importlib.import_module("literal")
    return [deepest(node.args[0].value)]


def _is_literal_import_module(node):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module" and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def import_graph(root, extensions=()):
    """(edges, function_level): edges {module: {imported module: first line}} over the
    package's own modules; function_level [(module, line number, source line)] of every import
    inside a function."""
    mods = modules_of(root)
    known = set(mods) | set(extensions)
    edges = {m: {} for m in known}
    function_level = []
    for name, (path, package) in mods.items():
        with open(path) as f:
            source = f.read()
        lines = source.split("\n")
        tree = ast.parse(source, path)
        inside = _inside_function(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, (ast.Import, ast.ImportFrom))
                    or _is_literal_import_module(node)):
                continue
            targets = [t for t in _targets(node, package, known) if t and t != name]
            if id(node) in inside:
                function_level.append((name, node.lineno, lines[node.lineno - 1]))
            for t in targets:
                edges[name].setdefault(t, node.lineno)
                # Importing a.b.c runs a.b's __init__ first, unless this module is inside a.b.
                parent = t.rpartition(".")[0]
                while parent:
                    if parent in known and not (name + ".").startswith(parent + "."):
                        edges[name].setdefault(parent, node.lineno)
                    parent = parent.rpartition(".")[0]
    return edges, function_level


def cycles(edges):
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layer_of(layers):
    return {m: i for i, (_, members) in enumerate(layers) for m in members}


def upward_imports(edges, layers):
    """["a (layer) imports b (higher layer) at line n", ...]"""
    rank = layer_of(layers)
    out = []
    for m, targets in sorted(edges.items()):
        for t, line in sorted(targets.items()):
            if m in rank and t in rank and rank[t] > rank[m]:
                out.append(f"{m} ({layers[rank[m]][0]}) imports {t} ({layers[rank[t]][0]}) "
                           f"at line {line}")
    return out


def unexplained(function_level):
    """Function-level imports without a reason comment on their line."""
    return [f"{m}:{n}: {text.strip()}" for m, n, text in function_level if "#" not in text]


# -- the real package ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE_ROOT, EXTENSIONS)


def test_every_module_has_exactly_one_layer(graph):
    edges, _ = graph
    named = [m for _, members in LAYERS for m in members]
    assert len(named) == len(set(named)), "a module is named in two layers"
    assert sorted(set(edges) - set(named)) == [], "modules with no layer (add them to LAYERS " \
        "and to ARCHITECTURE.md)"
    assert sorted(set(named) - set(edges)) == [], "LAYERS names modules that do not exist"


def test_no_import_cycle(graph):
    edges, _ = graph
    assert cycles(edges) == []


def test_no_import_goes_up_a_layer(graph):
    edges, _ = graph
    assert upward_imports(edges, LAYERS) == []


def test_every_function_level_import_says_why(graph):
    _, function_level = graph
    assert unexplained(function_level) == []


def doc_name(module):
    """How ARCHITECTURE.md names a module: relative to troupe.ray or troupe (`_objects`,
    `util.actor_pool`, `_cluster`), the two packages by their full names."""
    if module in ("troupe", "troupe.ray"):
        return module
    for prefix in ("troupe.ray.", "troupe."):
        if module.startswith(prefix):
            return module[len(prefix):]
    return module


def test_architecture_names_every_layer_and_module():
    with open(os.path.join(REPO, "ARCHITECTURE.md")) as f:
        doc = f.read()
    section = doc[doc.index("## The Python package"):]
    section = section[:section.index("\n## ", 1)]
    for title, members in LAYERS:
        assert title in section, title
        for m in members:
            assert f"`{doc_name(m)}`" in section, f"ARCHITECTURE.md does not list {m}"


# -- the checker fails where it must --------------------------------------------------------------

def _plant(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_checker_reports_a_planted_circle_through_a_function_level_import(tmp_path):
    root = _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg import high  # planted\n    return high\n",
        "pkg/high.py": "from pkg import low\n",
    })
    edges, function_level = import_graph(root)
    assert cycles(edges) == [["pkg.high", "pkg.low"]]
    layers = [("low", ["pkg", "pkg.low"]), ("high", ["pkg.high"])]
    assert upward_imports(edges, layers) == [
        "pkg.low (low) imports pkg.high (high) at line 2"]
    assert function_level == [("pkg.low", 2, "    from pkg import high  # planted")]


def test_checker_reports_a_circle_through_a_package_init(tmp_path):
    # low imports pkg.sub.types; importing it runs pkg/sub/__init__.py, which imports top,
    # which imports low: a circle although no module names its importer.
    root = _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "from pkg.sub import types\n",
        "pkg/top.py": "from pkg import low\n",
        "pkg/sub/__init__.py": "from pkg import top\n",
        "pkg/sub/types.py": "",
    })
    edges, _ = import_graph(root)
    assert cycles(edges) == [["pkg.low", "pkg.sub", "pkg.top"]]


def test_checker_reports_a_function_level_import_without_a_reason(tmp_path):
    root = _plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    import importlib\n    return importlib."
                    "import_module('pkg.b')\n",
        "pkg/b.py": "",
    })
    edges, function_level = import_graph(root)
    assert edges["pkg.a"] == {"pkg.b": 3}
    assert unexplained(function_level) == ["pkg.a:2: import importlib",
                                           "pkg.a:3: return importlib.import_module('pkg.b')"]


# -- C++: no lower layer reads the controller's public headers ------------------------------------

# The public headers that the layers below the controller implement or serve: errors, values,
# futures (common) and the worker-class contract (worker). The others (cluster.h,
# virtual_cluster.h, worker_group.h, named_sharding.h, object_ref.h, stream.h, troupe.h) are the
# controller's API.
BELOW_CONTROLLER = ("common", "wire", "transport", "store", "head", "agent", "worker")
SERVED_BELOW = {"troupe/error.h", "troupe/value.h", "troupe/future.h", "troupe/worker_class.h"}


def test_no_source_below_the_controller_includes_a_controller_header():
    include = re.compile(r'#include "(troupe/[a-z_]+\.h)"')
    found = []
    for folder in BELOW_CONTROLLER:
        for d, _, files in os.walk(os.path.join(REPO, "src", folder)):
            for f in sorted(files):
                if not f.endswith((".cc", ".h")):
                    continue
                with open(os.path.join(d, f)) as src:
                    for n, line in enumerate(src, 1):
                        m = include.match(line.strip())
                        if m and m.group(1) not in SERVED_BELOW:
                            found.append(f"src/{folder}/{f}:{n}: {m.group(1)}")
    assert found == []
