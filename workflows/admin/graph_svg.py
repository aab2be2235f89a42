"""A workflow's graph drawn as inline SVG, server-side, for the admin (docs/admin.md,
"Workflows"): nothing is fetched from outside and no script runs in the page.

The layout is the first steps of Sugiyama's layered drawing (Sugiyama, Tagawa and Toda,
"Methods for visual understanding of hierarchical system structures", 1981), kept
small: each node's layer is its longest path from a node without upstreams (so every
edge points rightwards), and within a layer nodes are ordered by the mean position of
their upstreams (one barycentre sweep), which untangles chains, fan-outs and diamonds.
Layers are columns, left to right, as in Airflow's graph view.
"""

from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

BOX_W, BOX_H = 150, 40  # px
GAP_X, GAP_Y = 40, 14
MARGIN = 12
LEGEND_H = 28
NAME_CHARS = 19  # longer names are cut (the full name is the box's tooltip)

# state -> (fill, stroke); a light fill with a dark border keeps the black text readable.
COLOURS = {
    "pending": ("#f1f3f5", "#868e96"),
    "running": ("#d0e4ff", "#1c6dd0"),
    "succeeded": ("#d3f0dc", "#1e8449"),
    "failed": ("#fbd5d5", "#c0392b"),
    "cancelled": ("#e4e4e4", "#555555"),
    "upstream_failed": ("#ffe3c4", "#d35400"),
    "skipped": ("#fff8db", "#a08a2a"),
    "": ("#ffffff", "#868e96"),  # a node of the definition, outside any run
}


@dataclass
class Node:
    """One box: ``key`` (any hashable id), ``name``, ``state`` (a NodeState value, or ""
    for a definition), ``note`` (second line, e.g. "attempt 2/3"), ``url`` (link, or
    ""), ``rule`` (its trigger rule when not the default, or "": shown first on the
    second line, in the tooltip, and as a dashed border), ``kind`` ("", "map": a mapped
    node, drawn as a stack of boxes, or "workflow": a sub-workflow node, drawn with a
    double border)."""

    key: object
    name: str
    state: str = ""
    note: str = ""
    url: str = ""
    rule: str = ""
    kind: str = ""


def layers(keys: list, edges: list[tuple]) -> dict:
    """Each key's layer: 0 for a node without upstreams, else one more than its deepest
    upstream's (longest path). ``edges`` are (upstream, downstream) pairs of ``keys``; the
    graph is acyclic (workflows/validation.py refused cycles)."""
    ups: dict = {k: [] for k in keys}
    downs: dict = {k: [] for k in keys}
    for up, down in edges:
        ups[down].append(up)
        downs[up].append(down)
    layer = {}
    pending = {k: len(ups[k]) for k in keys}
    ready = [k for k in keys if not pending[k]]
    while ready:  # Kahn's topological order: a node's upstreams are placed before it
        key = ready.pop()
        layer[key] = max((layer[u] + 1 for u in ups[key]), default=0)
        for down in downs[key]:
            pending[down] -= 1
            if not pending[down]:
                ready.append(down)
    return layer


def positions(keys: list, edges: list[tuple]) -> dict:
    """Each key's (column, row): the column its layer, the row its rank in the layer by
    the barycentre of its upstreams' rows (ties in the given order)."""
    layer = layers(keys, edges)
    ups: dict = {k: [] for k in keys}
    for up, down in edges:
        ups[down].append(up)
    order = {k: i for i, k in enumerate(keys)}
    columns: dict[int, list] = {}
    for key in keys:
        columns.setdefault(layer[key], []).append(key)
    place = {}
    for column in sorted(columns):
        def weight(key):
            rows = [place[u][1] for u in ups[key]]
            return (sum(rows) / len(rows) if rows else order[key], order[key])
        for row, key in enumerate(sorted(columns[column], key=weight)):
            place[key] = (column, row)
    return place


def _short(text: str, size: int = NAME_CHARS) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def draw(nodes: list[Node], edges: list[tuple], legend: bool = True) -> SafeString:
    """The SVG of ``nodes`` with ``edges`` ((upstream key, downstream key) pairs) as
    arrows: boxes coloured by state (COLOURS), each linking to its ``url``. Safe HTML."""
    keys = [n.key for n in nodes]
    place = positions(keys, edges)
    top = MARGIN + (LEGEND_H if legend else 0)
    cols = max((c for c, _ in place.values()), default=0) + 1
    rows = max((r for _, r in place.values()), default=0) + 1
    width = MARGIN * 2 + cols * BOX_W + (cols - 1) * GAP_X
    height = top + MARGIN + rows * BOX_H + (rows - 1) * GAP_Y

    def corner(key):
        column, row = place[key]
        return MARGIN + column * (BOX_W + GAP_X), top + row * (BOX_H + GAP_Y)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="workflow-graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="workflow graph" font-family="sans-serif" font-size="12">',
        '<defs><marker id="wf-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
    ]
    if legend:
        x = MARGIN
        for state, (fill, stroke) in COLOURS.items():
            if not state:
                continue
            parts.append(f'<rect x="{x}" y="{MARGIN}" width="14" height="14" rx="3" '
                         f'fill="{fill}" stroke="{stroke}"/>'
                         f'<text x="{x + 19}" y="{MARGIN + 11}" fill="#222">{state}</text>')
            x += 30 + 7 * len(state)
    for up, down in edges:
        ux, uy = corner(up)
        dx, dy = corner(down)
        x1, y1, x2, y2 = ux + BOX_W, uy + BOX_H / 2, dx, dy + BOX_H / 2
        bend = (x2 - x1) / 2
        parts.append(f'<path d="M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}" '
                     f'fill="none" stroke="#777" stroke-width="1.3" '
                     f'marker-end="url(#wf-arrow)"/>')
    for node in nodes:
        x, y = corner(node.key)
        fill, stroke = COLOURS.get(node.state, COLOURS[""])
        title = f"{node.name}: {node.state}" if node.state else node.name
        note = node.note or node.state
        dash = ""
        if node.rule:
            title += f" (trigger rule {node.rule})"
            note = f"{node.rule} · {note}" if note else node.rule
            dash = ' stroke-dasharray="5 3"'
        under = inner = ""
        if node.kind == "map":  # a stack: the node's many items, collapsed
            title += " (mapped: one run per item)"
            under = (f'<rect x="{x + 4}" y="{y + 4}" width="{BOX_W}" height="{BOX_H}" rx="6" '
                     f'fill="{fill}" stroke="{stroke}" stroke-width="1.2"/>')
        elif node.kind == "workflow":  # a double border: a workflow run inside
            title += " (sub-workflow: runs a workflow)"
            inner = (f'<rect x="{x + 3}" y="{y + 3}" width="{BOX_W - 6}" height="{BOX_H - 6}" '
                     f'rx="4" fill="none" stroke="{stroke}" stroke-width="1"/>')
        box = (f'<g class="wf-node wf-{escape(node.state or "definition")}'
               f'{" wf-" + node.kind if node.kind else ""}">'
               f'<title>{escape(title)}</title>{under}'
               f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" '
               f'stroke="{stroke}" stroke-width="1.6"{dash}/>{inner}'
               f'<text x="{x + 8}" y="{y + 16}" fill="#111" font-weight="bold">'
               f'{escape(_short(node.name))}</text>'
               f'<text x="{x + 8}" y="{y + 32}" fill="#333" font-size="11">'
               f'{escape(_short(note, 25))}</text></g>')
        if node.url:
            box = f'<a href="{escape(node.url)}">{box}</a>'
        parts.append(box)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text above is escaped
