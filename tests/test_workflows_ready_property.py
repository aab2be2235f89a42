"""Property: on PostgreSQL the engine's readiness reads written out as SQL
(workflows/execution/ready_pg.py, the handoff path of engine.start_ready, taken when ``below`` is
given) decide what the ORM path (engine.start_ready with ``node_ids``, which reconcile,
resume and SQLite take) decides, and both what the rules say (docs/workflows.md, "The
rules", "Failure" and "Trigger rules"): of the pending node runs below the acked nodes,
those of a running workflow run whose trigger rule holds (rules.verdict) start, or are
cancelled when their job was; then the pending nodes whose rule can no longer hold are
marked, and those below the cancelled or marked ones whose rule now holds start.

Seeded random DAGs (a few dozen), random trigger rules on half of them, several workflow
runs each in random states, random node run states (some as an execution could leave
them, some arbitrary), some node jobs cancelled, a random set of acked upstream nodes.
Each path runs in a transaction rolled back, so both see the same rows."""

import random
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from jobs.models import Job
from jobs.registry import handler
from workflows import services
from workflows.execution import rules
from workflows.execution.engine import downstream_of, start_ready
from workflows.models import NodeRun, NodeState, WorkflowRun, WorkflowRunState

pytestmark = pytest.mark.django_db

SEEDS = range(40)
STATES = [NodeState.PENDING, NodeState.RUNNING, NodeState.SUCCEEDED, NodeState.FAILED,
          NodeState.CANCELLED, NodeState.UPSTREAM_FAILED, NodeState.SKIPPED]
RUN_STATES = [WorkflowRunState.RUNNING] * 6 + [WorkflowRunState.PAUSED,
                                               WorkflowRunState.CANCELLED,
                                               WorkflowRunState.FAILED]


@handler("wf.prop")
def prop(ctx, payload):
    return None


def random_dag(rng: random.Random) -> tuple[list[str], list[tuple[str, str]]]:
    """Nodes n0..nk and edges only from a lower to a higher number (so acyclic), dense
    enough for fan-ins and diamonds."""
    names = [f"n{i}" for i in range(rng.randint(2, 12))]
    density = rng.choice([0.15, 0.25, 0.4])
    edges = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
             if rng.random() < density]
    return names, edges


def ancestors(name: str, ups: dict[str, list[str]]) -> set[str]:
    seen, todo = set(), list(ups.get(name, ()))
    while todo:
        up = todo.pop()
        if up not in seen:
            seen.add(up)
            todo += ups.get(up, ())
    return seen


def node_states(rng, names, ups, consistent: bool, planted: str | None = None,
                rule_of: dict | None = None) -> dict[str, str]:
    """A state per node: arbitrary, or as an execution could have left them (a node ran
    only once its rule held; one whose rule can no longer hold is pending, left for
    propagate to mark, or marked already)."""
    if not consistent:
        # Weighted to successes and pending rows, or nothing would ever be ready.
        return {name: rng.choices(STATES, weights=[3, 1, 5, 1, 1, 1, 1])[0] for name in names}
    # ``planted``: that node is pending with every ancestor succeeded, i.e. ready; the
    # rest follows the rule below (random graphs and states rarely make one ready).
    states: dict[str, str] = {}
    if planted is not None:
        states = {up: NodeState.SUCCEEDED for up in ancestors(planted, ups)}
        states[planted] = NodeState.PENDING
    progress = rng.uniform(0.6, 0.98)  # how far this execution got: its success rate
    for name in names:  # names are in topological order
        if name in states:
            continue
        above = [states[u] for u in ups.get(name, ())]
        fate = rules.verdict(rule_of[name], above)
        if fate == rules.READY:
            states[name] = NodeState.SUCCEEDED if rng.random() < progress else rng.choices(
                [NodeState.PENDING, NodeState.RUNNING, NodeState.FAILED, NodeState.CANCELLED],
                weights=[12, 2, 1, 1])[0]
        elif fate is not None:
            states[name] = rng.choice([NodeState.PENDING, fate])
        else:
            states[name] = NodeState.PENDING
    return states


def build(seed: int):
    """One seeded case: its workflow runs' ids, the acked node ids (``below``), and
    what the oracle needs: per node run (id -> (workflow run, node)), the upstream node
    ids, the workflow runs' states, the cancelled jobs' nodes."""
    rng = random.Random(seed)
    names, edges = random_dag(rng)
    rule_of = {n: rng.choice(rules.RULES) if seed % 2 else rules.DEFAULT for n in names}
    wf = services.create_workflow(f"prop{seed}", [
        {"name": n, "handler": "wf.prop", "payload": {}, "trigger_rule": rule_of[n]}
        for n in names], edges)
    nodes = {n.name: n for n in wf.nodes.all()}
    ups: dict[str, list[str]] = {}
    for a, b in edges:
        ups.setdefault(b, []).append(a)
    below_any = [n for n in names if n in ups]
    planted = rng.choice(below_any) if below_any else None
    gone = {nodes[n].pk for n in names if rng.random() < (0.4 if n == planted else 0.15)}
    Job.objects.filter(workflow_node__pk__in=gone).update(status=Job.Status.CANCELLED)
    base = timezone.now().replace(microsecond=0)
    wr_states, rows = {}, {}
    for i in range(rng.randint(2, 5)):
        plant = planted if i == 0 else None
        wr = WorkflowRun.objects.create(
            workflow=wf, scheduled_at=base + timedelta(seconds=i),
            state=WorkflowRunState.RUNNING if plant and rng.random() < 0.8
            else rng.choice(RUN_STATES))
        wr_states[wr.pk] = wr.state
        states = node_states(rng, names, ups, consistent=plant is not None
                             or rng.random() < 0.7, planted=plant, rule_of=rule_of)
        made = NodeRun.objects.bulk_create([NodeRun(
            workflow_run=wr, node=nodes[n], state=states[n],
            run_id=None if states[n] == NodeState.PENDING else 10**9 + seed * 1000 + i * 50 + k)
            for k, n in enumerate(names)])
        rows.update({nr.pk: (wr.pk, nr.node_id, nr.state) for nr in made})
    # Mostly nodes that succeeded somewhere, as an ack's are; a few others, or all.
    succeeded = {row[1] for row in rows.values() if row[2] == NodeState.SUCCEEDED}
    below = {n.pk for n in nodes.values()
             if rng.random() < (0.8 if n.pk in succeeded else 0.15)} or {nodes[names[0]].pk}
    if rng.random() < 0.2:
        below = {node.pk for node in nodes.values()}
    upstream = {nodes[b].pk: {nodes[a].pk for a in ups_of}
                for b, ups_of in ups.items()}
    rules_by_node = {nodes[n].pk: rule_of[n] for n in names}
    return list(wr_states), below, rows, upstream, wr_states, gone, rules_by_node


def oracle(below, rows, upstream, wr_states, gone, rule_of
           ) -> tuple[set[int], dict[int, str]]:
    """The rules, by hand: (node run ids started, every node run's state after). A round
    decides every candidate on the states before it (one statement), then the nodes
    cancelled with their job settle their workflow runs (engine.settle): marks in node
    order (topological here), then another round below what changed."""
    state = {pk: row[2] for pk, row in rows.items()}
    by_wr: dict[int, dict[int, int]] = {}
    for pk, (wr, node_id, _) in rows.items():
        by_wr.setdefault(wr, {})[node_id] = pk

    def fate(pk):
        wr, node_id, _ = rows[pk]
        return rules.verdict(rule_of[node_id],
                             [state[by_wr[wr][u]] for u in upstream.get(node_id, ())])

    started: set[int] = set()
    wrs, changed = set(wr_states), set(below)
    while changed:
        below_of = {n for n, ups in upstream.items() if ups & changed}
        ready = [pk for pk, (wr, node_id, _) in rows.items()
                 if wr in wrs and state[pk] == NodeState.PENDING and node_id in below_of
                 and wr_states[wr] == WorkflowRunState.RUNNING and fate(pk) == rules.READY]
        cut = {pk for pk in ready if rows[pk][1] in gone}
        for pk in ready:
            state[pk] = NodeState.CANCELLED if pk in cut else NodeState.RUNNING
        started |= set(ready) - cut
        wrs = {rows[pk][0] for pk in cut}
        changed = {rows[pk][1] for pk in cut}
        for wr in sorted(wrs):
            for node_id in sorted(by_wr[wr]):
                pk = by_wr[wr][node_id]
                if state[pk] == NodeState.PENDING and fate(pk) not in (None, rules.READY):
                    state[pk] = fate(pk)
                    changed.add(node_id)
    return started, state


def rolled_back(call, wr_ids) -> tuple[set[int], dict[int, str]]:
    """``call()``'s node runs started and every node run's state after it, undone."""
    with transaction.atomic():
        started = set(call())
        after = dict(NodeRun.objects.filter(workflow_run_id__in=wr_ids)
                     .values_list("pk", "state"))
        transaction.set_rollback(True)
    return started, after


@pytest.mark.parametrize("seed", SEEDS)
def test_the_sql_and_the_orm_readiness_decide_what_the_rules_say(seed):
    wr_ids, below, rows, upstream, wr_states, gone, rule_of = build(seed)
    now = timezone.now()

    sql = rolled_back(lambda: start_ready(wr_ids, now, "default", below=below), wr_ids)
    orm = rolled_back(lambda: start_ready(wr_ids, now, "default",
                                          node_ids=downstream_of(below, "default")), wr_ids)

    expected = oracle(below, rows, upstream, wr_states, gone, rule_of)
    assert sql == orm, f"seed {seed}: ready_pg and the ORM disagree"
    assert sql == expected, f"seed {seed}: the engine and the rules disagree"
