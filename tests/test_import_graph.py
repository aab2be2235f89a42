"""The code layout rules of docs/architecture.md ("Code layout and dependency rule"),
checked over the source with the stdlib's ast: each layer imports only the layers below
it, no import cycle between the layers, no circle between files, and no module of the
apps over 400 lines.

Every import counts, at module level or inside a function (an import deferred into a
function still makes the two files depend on each other). ``from a.b import c`` is an
edge to the module ``a.b.c`` when that is a file, else to ``a.b``; importing a module
does not count as importing its parents' ``__init__``, as in import-linter. bench/'s
scripts import each other by bare name (they run with bench/ on sys.path), so a bare
name that is a file of bench/ is that file. bench/peers/ holds other projects' code and
is left out.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("scheduler_core", "jobs", "runs", "scheduler_tasks", "workflows",
            "scheduler_project", "chaos", "bench")
SIZE_CHECKED = ("scheduler_core", "jobs", "runs", "scheduler_tasks", "workflows",
                "scheduler_project")
MAX_LINES = 400
# The one direction between the layers (docs/architecture.md): each may import only those
# listed after it. A layer is a package or a subtree of one (jobs.models, the jobs app's
# models, sits below runs; the rest of jobs above it); chaos and bench sit on top.
LAYERS = {
    "scheduler_core": set(),
    "jobs.models": {"scheduler_core"},
    "runs": {"scheduler_core", "jobs.models"},
    "jobs": {"scheduler_core", "jobs.models", "runs"},
    "scheduler_tasks": {"scheduler_core", "jobs.models", "runs", "jobs"},
    "workflows": {"scheduler_core", "jobs.models", "runs", "jobs", "scheduler_tasks"},
    "scheduler_project": {"scheduler_core", "jobs.models", "runs", "jobs", "scheduler_tasks",
                          "workflows"},
    "chaos": {"scheduler_core", "jobs.models", "runs", "jobs", "scheduler_tasks", "workflows",
              "scheduler_project"},
    "bench": {"scheduler_core", "jobs.models", "runs", "jobs", "scheduler_tasks", "workflows",
              "scheduler_project", "chaos"},
}


def source_files() -> dict[str, Path]:
    """Module name -> file, for every .py file of PACKAGES except migrations, bench/peers
    and bench/.venvs (the peers' git-ignored virtualenvs, other projects' code)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "migrations" in rel.parts or rel.parts[:2] in (("bench", "peers"),
                                                              ("bench", ".venvs")):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """Every dotted name ``tree`` (the source of ``module``) imports, absolute; for
    ``from x import y``, both ``x.y`` and ``x`` (the caller keeps the first that is a
    module of ours)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [[alias.name] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            names += [[f"{base}.{alias.name}", base] for alias in node.names]
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (anywhere in its source)."""
    modules = source_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for candidates in imported_names(tree, name, path.name == "__init__.py"):
            for candidate in candidates:
                if name.startswith("bench.") and "." not in candidate:
                    candidate = f"bench.{candidate}"  # a bench script's sibling
                target = longest_known(candidate, modules)
                if target is not None:
                    if target != name:
                        graph[name].add(target)
                    break
    return graph


def longest_known(dotted: str, modules) -> str | None:
    """The longest prefix of ``dotted`` that is one of ``modules``, if any."""
    parts = dotted.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan,
    iterative), each sorted: every import cycle lies within one."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_of(module: str) -> str:
    return module.split(".")[0]


def layer_of(module: str) -> str:
    """The layer of ``module``: the longest key of LAYERS that is ``module`` or a parent
    of it (whole dotted components: jobs.models_extra is not in jobs.models)."""
    found = longest_known(module, LAYERS)
    assert found is not None, f"{module} is in no layer"
    return found


def test_no_circle_between_files():
    assert cycles(import_graph()) == []


def test_layers_import_only_downwards():
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if layer_of(target) != layer_of(module)
        and layer_of(target) not in LAYERS[layer_of(module)]
    )
    assert wrong == []


def test_no_cycle_between_layers():
    graph: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    for module, targets in import_graph().items():
        graph[layer_of(module)] |= {layer_of(t) for t in targets} - {layer_of(module)}
    assert cycles(graph) == []


def test_no_module_of_the_apps_is_over_400_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for name, path in source_files().items()
        if package_of(name) in SIZE_CHECKED
        and (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    # The checks above are only as good as the graph: a deferred import and a relative
    # one must both be edges.
    tree = ast.parse("def f():\n    from jobs import conf\nfrom .x import y\nfrom . import z\n")
    names = imported_names(tree, "runs.brokers.redis", is_package=False)
    assert ["jobs.conf", "jobs"] in names
    assert ["runs.brokers.x.y", "runs.brokers.x"] in names
    assert ["runs.brokers.z", "runs.brokers"] in names
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_module_is_in_the_longest_layer_that_holds_it():
    assert layer_of("jobs.models") == "jobs.models"
    assert layer_of("jobs.models.job") == "jobs.models"
    assert layer_of("jobs.services") == "jobs"
    assert layer_of("jobs.models_extra") == "jobs"  # whole components, not characters
