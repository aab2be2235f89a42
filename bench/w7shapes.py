"""W7's shapes and figures, stdlib only (BENCHMARKS.md, "W7"): shared by our side
(bench/workflows.py) and Celery's (bench/peers/celery/canvas.py), which runs in Celery's
own virtualenv.

Shapes (node names and edges, upstream -> downstream):

* ``fan``: 1 root -> FAN_WIDTH parallel nodes -> 1 sink, FAN_WIDTH + 2 nodes in all.
  FAN_WIDTH is 998 so the whole graph is 1,000 nodes, our WORKFLOW_MAX_NODES
  (docs/workflows.md, "Validation"); Celery's side is ``chain(root, chord(998, sink))``.
* ``chain``: CHAIN_LENGTH nodes one after the other.
* ``map``: 1 root whose result is a list of MAP_ITEMS -> 1 node mapped over it
  (docs/workflows.md, "Mapped nodes": one run per item, made in the root's ack) -> 1
  sink that reads the items' results; Celery's side is a task that receives the list
  and replaces itself by ``chord(group(item per element), sink)``. Its figures are the
  ``fan`` shape's, each item taking the place of a parallel node (``n<index>``).
  MAP_ITEMS is 1,000 (our default ``OWNER_MAX_MAP_ITEMS``), or BENCH_W7_MAP_ITEMS for a
  smaller smoke run.

Every node is a no-op that notes when its handler started (Unix seconds); a handoff is
the time from an upstream's handler start to its downstream's handler start (for a
node with several upstreams, from the last of them), the same instant on both systems.
"""

import os

FAN_WIDTH = 998
CHAIN_LENGTH = 100
MAP_ITEMS = int(os.environ.get("BENCH_W7_MAP_ITEMS", "1000"))


def shape(name: str, fan_width: int = FAN_WIDTH,
          chain_length: int = CHAIN_LENGTH) -> tuple[list[str], list[tuple[str, str]]]:
    """(node names, edges) of shape ``name`` ("fan", "chain" or "map", whose items stand
    as nodes ``n<index>``); ValueError otherwise."""
    if name == "fan":
        middle = [f"n{i}" for i in range(fan_width)]
        edges = [("root", m) for m in middle] + [(m, "sink") for m in middle]
        return ["root", *middle, "sink"], edges
    if name == "chain":
        nodes = [f"c{i}" for i in range(chain_length)]
        return nodes, list(zip(nodes, nodes[1:], strict=False))
    if name == "map":  # the items as nodes, for the figures (the definition: map_nodes)
        middle = [f"n{i}" for i in range(MAP_ITEMS)]
        edges = [("root", m) for m in middle] + [(m, "sink") for m in middle]
        return ["root", *middle, "sink"], edges
    raise ValueError(f"unknown W7 shape {name!r} (fan, chain, map)")


def percentile(values: list[float], p: float) -> float | None:
    """The p-th percentile (0-100) by linear interpolation; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def handoffs(starts: dict[str, float], ends: dict[str, float],
             edges: list[tuple[str, str]]) -> dict[str, float]:
    """Seconds from the last upstream's ``ends`` to each downstream's ``starts``, by
    downstream node name (nodes without upstreams have none)."""
    last: dict[str, float] = {}
    for up, down in edges:
        last[down] = max(last.get(down, float("-inf")), ends[up])
    return {down: starts[down] - at for down, at in last.items()}


def figures(starts: dict[str, float], ends: dict[str, float], edges, name: str) -> dict:
    """The handoff figures of one run of shape ``name``, in ms: ``p50_ms``/``p99_ms``/
    ``max_ms`` over every downstream node; for ``fan`` also ``first_fan_out_ms`` (the
    root to the first of its downstreams to start: past it the 998 wait for the 2
    processes, so the others measure the queue), ``fan_out_p50_ms``/``p99`` and
    ``fan_in_ms`` (the last parallel node to the sink)."""
    h = {k: v * 1000.0 for k, v in handoffs(starts, ends, edges).items()}
    out = {"samples": len(h), "p50_ms": _r(percentile(list(h.values()), 50)),
           "p99_ms": _r(percentile(list(h.values()), 99)),
           "max_ms": _r(max(h.values()) if h else None)}
    if name in ("fan", "map"):
        middle = [v for k, v in h.items() if k != "sink"]
        out.update(first_fan_out_ms=_r(min(middle)), fan_out_p50_ms=_r(percentile(middle, 50)),
                   fan_out_p99_ms=_r(percentile(middle, 99)), fan_in_ms=_r(h["sink"]))
    return out


def _r(value):
    return None if value is None else round(value, 2)


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of every live process in process group ``pgid`` (a
    daemon spawned in a session of its own, with its children), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, ... utime (12th), stime (13th).
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return round(total / tick, 2)
