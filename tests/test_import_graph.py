"""The code layout rules of docs/architecture.md ("Code layout and dependency rule"),
checked over the source with the stdlib's ast: each layer imports only the layers the
section's table says it may, no import cycle between the layers, no circle between files,
and no module of the apps over 400 lines. The layers are read from that table, and its
picture must draw the same order, so the doc and the check cannot drift apart.

Every import counts, at module level or inside a function (an import deferred into a
function still makes the two files depend on each other). ``from a.b import c`` is an
edge to the module ``a.b.c`` when that is a file, else to ``a.b``; importing a module
does not count as importing its parents' ``__init__``, as in import-linter. bench/'s
scripts import each other by bare name (they run with bench/ on sys.path), so a bare
name that is a file of bench/ is that file. bench/peers/ holds other projects' code and
is left out.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SECTION = "## Code layout and dependency rule"
SIZE_CHECKED = ("scheduler_core", "jobs", "runs", "scheduler_tasks", "workflows",
                "scheduler_project")
MAX_LINES = 400


def layout_section() -> str:
    """The text of docs/architecture.md's SECTION, up to the next heading."""
    text = ARCHITECTURE.read_text()
    assert SECTION in text, f"docs/architecture.md has no {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    return re.split(r"^#{2,3} ", body, maxsplit=1, flags=re.MULTILINE)[0]


def layer_table(section: str) -> dict[str, set[str]]:
    """Layer -> the layers it may import, from the section's "layer | holds | may import"
    table: a backticked name per layer, "nothing of ours" or backticked names after."""
    lines = section.splitlines()
    head = next(i for i, line in enumerate(lines)
                if re.fullmatch(r"\|\s*layer\s*\|\s*holds\s*\|\s*may import\s*\|", line))
    layers = {}
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == 3 and re.fullmatch(r"`[\w.]+`", cells[0]), line
        layers[cells[0].strip("`")] = set(re.findall(r"`([\w.]+)`", cells[2]))
        assert layers[cells[0].strip("`")] or cells[2] == "nothing of ours", line
    return layers


def picture_edges(section: str) -> set[tuple[str, str]]:
    """The arrows of the section's mermaid flowchart, as (layer, layer) pairs: a node is
    ``id`` or ``id["label"]``, its layer the label if given, else the id."""
    block = re.search(r"```mermaid\n(.*?)```", section, re.DOTALL)
    assert block, "the section has no mermaid picture"
    node = re.compile(r'\s*(\w+)(?:\["([^"]+)"\])?\s*')
    labels, pairs = {}, []
    for line in block.group(1).splitlines():
        if "-->" not in line:
            continue
        ends = []
        for side in line.split("-->"):
            match = node.fullmatch(side)
            assert match, f"cannot read {line!r}"
            if match.group(2):
                labels[match.group(1)] = match.group(2)
            ends.append(match.group(1))
        pairs.append(tuple(ends))
    return {(labels.get(a, a), labels.get(b, b)) for a, b in pairs}


# The one direction between the layers: each may import only those its row lists. A
# layer is a package or a subtree of one (jobs.models sits below runs, the rest of jobs
# above it).
LAYERS = layer_table(layout_section())
PACKAGES = sorted({layer.split(".")[0] for layer in LAYERS})


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


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every node a path of ``edges`` leads to from ``start``, ``start`` left out."""
    seen, todo = set(), list(edges.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += edges.get(node, ())
    return seen


def layer_of(module: str) -> str:
    """The layer of ``module``: the longest key of LAYERS that is ``module`` or a parent
    of it (whole dotted components: jobs.models_extra is not in jobs.models)."""
    found = longest_known(module, LAYERS)
    assert found is not None, f"{module} is in no layer"
    return found


def test_no_circle_between_files():
    assert cycles(import_graph()) == []


def test_the_table_names_packages_and_subtrees_that_exist():
    modules = source_files()
    assert [layer for layer in LAYERS
            if not any(m == layer or m.startswith(f"{layer}.") for m in modules)] == []
    assert sorted({name for names in LAYERS.values() for name in names} - set(LAYERS)) == []


def test_the_table_orders_the_layers_without_a_cycle():
    assert cycles(LAYERS) == []


def test_the_picture_draws_the_table():
    # An arrow is "imports"; a layer may import whatever its arrows lead to.
    edges: dict[str, set[str]] = {}
    for source, target in picture_edges(layout_section()):
        edges.setdefault(source, set()).add(target)
    drawn = {layer for pair in edges.items() for layer in (pair[0], *pair[1])}
    assert drawn == set(LAYERS)
    assert {layer: reachable(edges, layer) for layer in LAYERS} == LAYERS


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


def test_the_doc_is_read_as_written():
    section = """
| layer | holds | may import |
|---|---|---|
| `low` | a | nothing of ours |
| `low.sub` | b | `low` |

```mermaid
flowchart TD
    low_sub["low.sub"] --> low
```
"""
    assert layer_table(section) == {"low": set(), "low.sub": {"low"}}
    assert picture_edges(section) == {("low.sub", "low")}
