"""The workflow-kill scenario (docs/reliability.md, "Scenarios"; docs/workflows.md, "Nothing lost"):
workers SIGKILLed at random while workflow runs of a 29-node graph full of diamonds (five
nodes with trigger rules, one node mapped over a list of five, one sub-workflow node
running a 3-node child workflow) go through them, a scheduler (the workflow reconcile)
and a dispatcher running.

What it checks beyond the common invariants (chaos/invariants.py, which already cover
the nodes' runs: they are runs of the ``chaos`` owner's jobs, run by ``chaos.work``, so
every execution is in the execution log and every duplicate must match an attempt
recorded ``lease_expired``):

* every node of every workflow run has exactly one node run and exactly one run (no node
  missing, none twice, no stray run of a node's job that no node run points at); the
  mapped node's node run has ITEMS items, each exactly one run, all succeeded; the
  sub-workflow node's node run has exactly one child workflow run, succeeded, each of
  whose CHILD_NODES nodes has exactly one run, and no child run is anyone else's;
* no workflow run stuck: every one ends ``succeeded`` within the drain's bound;
* no node started before its trigger rule held (docs/workflows.md, "Trigger rules"): an
  ``all_success`` node's first attempt started at or after each upstream's succeeded
  attempt finished, a ``one_success`` node's after one had, an ``all_done`` or
  ``none_failed`` node's after each upstream that ran had (database clock on both
  sides);
* every node ends in its rule's state: none fails, so the ``one_failed`` alarm and the
  node below it are ``skipped`` and every other node succeeded (RULES, EXPECTED);
* beside the workflow runs, one-off jobs with ``on_success`` and ``on_failure`` go through
  the same workers: each run that succeeded or died has exactly one callback run of that
  field, none of the other, and every callback run succeeded (chaos/callback_load.py).
"""

import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Count, Q

from chaos import callback_load
from chaos.kills import WorkerKill
from chaos.load import with_db_retry, work_seconds
from chaos.session import Session, Size
from jobs.models import OwnerPolicy
from runs.clock import db_now
from runs.models import Attempt, AttemptOutcome, Run
from workflows import services
from workflows.models import (
    MapItem,
    NodeRun,
    NodeState,
    Workflow,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
    WorkflowRunState,
)

# 20 nodes: diamonds a-{b1,b2}-c, c-{d1,d2,d3}-e (with b1 -> e across it), e-{f1,f2}-g,
# g-{h1..h4}-i, i-{j1,j2}-k, and a long side branch a -> side -> k: fan-outs of 2 to 4,
# fan-ins of 2 to 4, 11 levels on the longest path.
EDGES = [
    ("a", "b1"), ("a", "b2"), ("b1", "c"), ("b2", "c"),
    ("c", "d1"), ("c", "d2"), ("c", "d3"), ("d1", "e"), ("d2", "e"), ("d3", "e"),
    ("b1", "e"),
    ("e", "f1"), ("e", "f2"), ("f1", "g"), ("f2", "g"),
    ("g", "h1"), ("g", "h2"), ("g", "h3"), ("g", "h4"),
    ("h1", "i"), ("h2", "i"), ("h3", "i"), ("h4", "i"),
    ("i", "j1"), ("i", "j2"), ("j1", "k"), ("j2", "k"),
    ("a", "side"), ("side", "k"),
]
# Trigger rules (workflows/execution/rules.py) on five more nodes: "first_h" starts at the first of
# h1..h4's successes, "alarm" waits for a failure that never comes and is skipped with
# the node below it, "tidy" and "guard" run once all their upstreams are done.
EDGES += [
    ("h1", "first_h"), ("h2", "first_h"), ("h3", "first_h"), ("h4", "first_h"),
    ("c", "alarm"), ("e", "alarm"), ("i", "alarm"), ("alarm", "after_alarm"),
    ("k", "tidy"), ("alarm", "tidy"), ("first_h", "tidy"),
    ("alarm", "guard"), ("k", "guard"),
]
# A mapped node (docs/workflows.md, "Mapped nodes"): "fan" returns a list of ITEMS, "each"
# runs once per item, "gather" joins them before k.
EDGES += [("a", "fan"), ("fan", "each"), ("each", "gather"), ("gather", "k")]
ITEMS = 5
MAPS = {"each": "fan"}
# A sub-workflow node (docs/workflows.md, "Sub-workflows"): "sub" runs a child workflow
# x -> {y, z} after a, before k.
EDGES += [("a", "sub"), ("sub", "k")]
CHILD_NODES = ["x", "y", "z"]
CHILD_EDGES = [("x", "y"), ("x", "z")]
NODES = ["a", "b1", "b2", "c", "d1", "d2", "d3", "e", "f1", "f2", "g", "h1", "h2", "h3",
         "h4", "i", "j1", "j2", "k", "side", "first_h", "alarm", "after_alarm", "tidy",
         "guard", "fan", "each", "gather", "sub"]
RULES = {"first_h": "one_success", "alarm": "one_failed", "tidy": "all_done",
         "guard": "none_failed"}
EXPECTED = {name: "skipped" if name in ("alarm", "after_alarm") else "succeeded"
            for name in NODES}
# Nodes whose handler takes 0.2-0.8 s, so that a kill finds runs in flight; the others
# take under 50 ms.
LONG_NODES = {"b2", "d2", "h3", "side"}
MAX_ATTEMPTS = 10  # as the other scenarios' load: repeated kills must not dead-letter


@dataclass(frozen=True)
class WorkflowSize(Size):
    """A Size whose load is ``workflow_runs`` runs of the 25-node workflow and
    ``callback_jobs`` one-off jobs with callbacks."""

    workflow_runs: int = 0
    callback_jobs: int = 0


class WorkflowKill(WorkerKill):
    """WorkerKill's faults (a random worker SIGKILLed every 1.5-3.5 s, restarted at once:
    two or three of the three workers live at any time) over workflow runs instead of
    one-off jobs, their starts spread over the first 80% of the window."""

    name = "workflow-kill"
    # Continuations on (runs/execution/continuation.py): an owner limit would refuse every one, and
    # the kills would never land between an ack and the run it continued.
    tunables = {"OWNER_CONCURRENCY": 0}
    short = WorkflowSize(one_off=0, cron=0, duration_s=14, workers=3, concurrency=2,
                         workflow_runs=24, callback_jobs=40)
    long = WorkflowSize(one_off=0, cron=0, duration_s=120, workers=3, concurrency=3,
                        drain_s=300, workflow_runs=200, callback_jobs=400)

    def create_load(self, s: Session) -> None:
        OwnerPolicy.objects.filter(owner=s.user).update(max_running=None)
        child = services.create_workflow("chaos child", [
            {"name": name, "handler": "chaos.work", "max_attempts": MAX_ATTEMPTS,
             "timeout_s": 60, "payload": {"seconds": work_seconds(s.rng, 0)}}
            for name in CHILD_NODES], CHILD_EDGES, owner=s.user)
        nodes = [{"name": name, "handler": "chaos.work", "max_attempts": MAX_ATTEMPTS,
                  "timeout_s": 60, "trigger_rule": RULES.get(name, "all_success"),
                  "payload": {"seconds": (round(s.rng.uniform(0.2, 0.8), 3)
                                          if name in LONG_NODES else work_seconds(s.rng, 0)),
                              **({"items": ITEMS} if name == "fan" else {})},
                  **({"map": MAPS[name]} if name in MAPS else {})}
                 if name != "sub" else {"name": name, "workflow": child.pk}
                 for name in NODES]
        edges = [e for e in EDGES if e[0] != MAPS.get(e[1])]  # the map implies its edge
        workflow = services.create_workflow("chaos diamonds", nodes, edges, owner=s.user)
        count = s.size.workflow_runs
        window = s.size.duration_s * 0.8
        base = db_now() + timedelta(seconds=1)
        offsets = sorted(s.rng.uniform(0, window) for _ in range(count))
        for i, offset in enumerate(offsets):
            # Distinct by a microsecond each: UNIQUE (workflow, scheduled_at).
            services.start_workflow_run(
                workflow, run_key=f"chaos-{i}",
                scheduled_at=base + timedelta(seconds=offset, microseconds=i))
        s.extra["workflow"] = workflow.pk
        s.extra["child_workflow"] = child.pk
        s.extra["callback_parents"] = callback_load.create(
            s.user, s.rng, s.size.callback_jobs, base, window)
        s.say(f"workflow {workflow.pk}: {len(NODES)} nodes, {len(EDGES)} edges, "
              f"{count} workflow runs and {s.size.callback_jobs} jobs with callbacks over "
              f"{window:.0f} s")

    def verify(self, s: Session) -> None:
        workflow = s.extra.get("workflow")
        if workflow is None:
            s.result.failures.append("the workflow was never created")
            return
        live_at_drain = with_db_retry(_live, workflow)
        # The drain stopped the scheduler (the cron cutoff); the workflow reconcile is
        # its, so it comes back until every workflow run has ended or the bound passed.
        for daemon in s.cluster.of_kind("scheduler"):
            daemon.keep_down = False
        deadline = time.monotonic() + s.size.drain_s
        while with_db_retry(_live, workflow) and time.monotonic() < deadline:
            s.tick(0.5)
        figures = with_db_retry(_figures, workflow, len(NODES), EXPECTED)
        figures["wrong_children"] = with_db_retry(_wrong_children, workflow,
                                                  s.extra.get("child_workflow"))
        figures.update(with_db_retry(callback_load.figures,
                                     s.extra.get("callback_parents", [])))
        figures["live_at_drain"] = live_at_drain
        figures["worker_kills"] = sum(1 for f in s.result.fault_log if f.kind == "SIGKILL")
        figures["duplicates_explained"] = (s.result.duplicate_executions
                                           - len(s.result.unexplained_duplicates))
        s.result.figures.update(figures)
        expected = s.size.workflow_runs
        if figures["workflow_runs"] != expected:
            s.result.failures.append(f"{figures['workflow_runs']} workflow runs, not {expected}")
        for key, what in (("stuck", "workflow runs not succeeded after the drain's bound"),
                          ("missing_nodes", "nodes of a workflow run without a run"),
                          ("wrong_items", f"mapped node runs without {ITEMS} items, each "
                                          "one run"),
                          ("wrong_children", "sub-workflow node runs without one succeeded "
                                             "child, each of its nodes one run"),
                          ("duplicate_node_runs", "node runs beyond one per node"),
                          ("stray_runs", "runs of a node's job no node run points at"),
                          ("early_downstream", "nodes started before their rule held"),
                          ("wrong_states", "nodes not in their rule's state"),
                          ("missing_callbacks", "ended runs without their callback"),
                          ("duplicate_callbacks", "callbacks beyond one per run and field"),
                          ("wrong_callbacks", "callbacks of the other outcome"),
                          ("callback_jobs_not_one_run", "callback jobs without one run"),
                          ("stuck_callbacks", "callback runs not succeeded")):
            if figures[key]:
                s.result.failures.append(f"{figures[key]} {what}")
        s.result.notes.append(
            f"workflow runs {figures['workflow_runs']} {figures['states']}: stuck "
            f"{figures['stuck']}, node runs {figures['node_runs']}, missing nodes "
            f"{figures['missing_nodes']}, duplicate node runs {figures['duplicate_node_runs']}, "
            f"stray runs {figures['stray_runs']}, downstream starts before an upstream's "
            f"success {figures['early_downstream']}, nodes not in their rule's state "
            f"{figures['wrong_states']}, mapped node runs without {ITEMS} items each one "
            f"run {figures['wrong_items']}, sub-workflow node runs without one succeeded "
            f"child {figures['wrong_children']}")
        s.result.notes.append(
            f"callback parents {figures['callback_parents']} "
            f"{figures['callback_parent_states']}: callbacks {figures['callbacks']}, "
            f"missing {figures['missing_callbacks']}, duplicate "
            f"{figures['duplicate_callbacks']}, of the other outcome "
            f"{figures['wrong_callbacks']}, jobs without one run "
            f"{figures['callback_jobs_not_one_run']}, not succeeded "
            f"{figures['stuck_callbacks']}")
        s.result.notes.append(
            f"still running when every run had drained: {live_at_drain}; a workflow run's "
            f"makespan (scheduled_at to finished) p50 {figures['makespan_p50_s']} s, max "
            f"{figures['makespan_max_s']} s; worker kills {figures['worker_kills']}; attempts "
            f"lease_expired {s.result.outcomes.get(AttemptOutcome.LEASE_EXPIRED, 0)}; "
            f"runs started in the ack that made them (continued) "
            f"{figures['started_in_the_ack']}")


def _live(workflow: int) -> int:
    return WorkflowRun.objects.filter(
        workflow_id=workflow, state__in=[WorkflowRunState.RUNNING, WorkflowRunState.PAUSED]
    ).count()


def _figures(workflow: int, width: int, expected: dict[str, str] | None = None) -> dict:
    """The workflow figures of docs/reliability.md's workflow-kill row: ``width`` nodes a
    workflow run, ``expected`` each node's final state by name (None: all succeeded)."""
    runs = WorkflowRun.objects.filter(workflow_id=workflow)
    states = dict(runs.values_list("state").annotate(n=Count("pk")).order_by())
    node_runs = NodeRun.objects.filter(workflow_run__workflow_id=workflow)
    per_node = node_runs.values("workflow_run_id", "node_id").annotate(n=Count("pk"))
    with_run = node_runs.filter(run_id__isnull=False)
    job_of = dict(Workflow.objects.get(pk=workflow).nodes.values_list("pk", "job_id"))
    node_runs_runs = set(with_run.values_list("run_id", flat=True))
    node_jobs_runs = set(Run.objects.filter(job_id__in=list(job_of.values()))
                         .values_list("pk", flat=True))
    items = MapItem.objects.filter(node_run__workflow_run__workflow_id=workflow)
    item_runs = set(items.values_list("run_id", flat=True))
    per_mapped = {nr: (n, ok) for nr, n, ok in items.values("node_run_id").annotate(
        n=Count("pk"), ok=Count("pk", filter=Q(state=NodeState.SUCCEEDED)))
        .values_list("node_run_id", "n", "ok").order_by()}
    mapped = dict(node_runs.filter(items__isnull=False).values_list("pk", "items"))
    spans = sorted((finished - scheduled).total_seconds() for scheduled, finished in
                   runs.exclude(finished_at=None).values_list("scheduled_at", "finished_at"))
    return {
        "workflow_runs": runs.count(),
        "states": states,
        "stuck": runs.exclude(state=WorkflowRunState.SUCCEEDED).count(),
        "node_runs": node_runs.count(),
        "missing_nodes": (runs.count() * width - with_run.count() - len(mapped)
                          - node_runs.filter(child_run_id__isnull=False).count()
                          - node_runs.filter(state=NodeState.SKIPPED).count()),
        # A mapped node run's items: as many as its list (ITEMS), each one run, succeeded.
        "wrong_items": sum(1 for pk, count in mapped.items()
                           if count != ITEMS or per_mapped.get(pk) != (ITEMS, ITEMS)),
        "wrong_states": sum(1 for name, state in node_runs.values_list("node__name", "state")
                            if state != (expected or {}).get(name, NodeState.SUCCEEDED)),
        "duplicate_node_runs": sum(n - 1 for n in per_node.filter(n__gt=1)
                                   .values_list("n", flat=True)),
        "stray_runs": len(node_jobs_runs - node_runs_runs - item_runs),
        "early_downstream": _early_downstream(workflow),
        "started_in_the_ack": _started_in_the_ack(node_runs_runs),
        "makespan_p50_s": round(spans[len(spans) // 2], 3) if spans else None,
        "makespan_max_s": round(spans[-1], 3) if spans else None,
    }


def _wrong_children(workflow: int, child_workflow: int | None) -> int:
    """Sub-workflow node runs of ``workflow``'s runs that lack exactly one child run of
    ``child_workflow``, succeeded, with one node run per child node, each with its own
    run (and no run of a child node's job beside them); plus child runs no node started."""
    if child_workflow is None:
        return 1
    parents = NodeRun.objects.filter(workflow_run__workflow_id=workflow,
                                     node__subworkflow_id=child_workflow)
    children = WorkflowRun.objects.filter(workflow_id=child_workflow)
    child_of = dict(parents.values_list("pk", "child_run_id"))
    good = set(children.filter(state=WorkflowRunState.SUCCEEDED)
               .values_list("pk", flat=True))
    node_runs = NodeRun.objects.filter(workflow_run__workflow_id=child_workflow)
    ran = Counter(node_runs.filter(run_id__isnull=False, state=NodeState.SUCCEEDED)
                  .values_list("workflow_run_id", flat=True))
    jobs = WorkflowNode.objects.filter(workflow_id=child_workflow).values("job_id")
    strays = Run.objects.filter(job_id__in=jobs).exclude(
        pk__in=node_runs.values("run_id")).count()
    wrong = sum(1 for child in child_of.values()
                if child not in good or ran[child] != len(CHILD_NODES))
    return wrong + strays + (children.count() - len(set(child_of.values()) - {None}))


def _started_in_the_ack(run_ids: set[int]) -> int:
    """Runs whose first attempt started within 2 ms of the run's creation: continued
    ones, leased in the ack that made them (a pushed run waits for that ack's commit, the
    push and a lease). About: a figure, not a verdict."""
    created = dict(Run.objects.filter(pk__in=list(run_ids)).values_list("pk", "created_at"))
    return sum(1 for run, started in Attempt.objects.filter(run_id__in=list(run_ids), number=1)
               .values_list("run_id", "started_at")
               if (started - created[run]).total_seconds() < 0.002)


def _early_downstream(workflow: int) -> int:
    """Edges (in a workflow run) whose downstream's first attempt started before the
    upstream's succeeded attempt finished; an upstream that never ran (skipped) counts
    for an all_success node only; a one_success node counts once, when it started
    before all of its upstreams finished. A mapped node starts with its first item's
    first attempt and finishes with its last item's success; a sub-workflow node with its
    child's first node's first attempt and its child's end."""
    node_runs = NodeRun.objects.filter(workflow_run__workflow_id=workflow)
    run_of = {(wr, node): run for wr, node, run in
              node_runs.values_list("workflow_run_id", "node_id", "run_id")}
    items: dict[tuple, list[int]] = {}
    for wr, node, run in MapItem.objects.filter(
            node_run__workflow_run__workflow_id=workflow).values_list(
            "node_run__workflow_run_id", "node_run__node_id", "run_id"):
        items.setdefault((wr, node), []).append(run)
    # A sub-workflow node's child's runs stand for it, as a mapped node's items do.
    for wr, run in NodeRun.objects.filter(
            workflow_run__in=node_runs.filter(child_run_id__isnull=False)
            .values("child_run_id"), run_id__isnull=False).values_list(
            "workflow_run_id", "run_id"):
        items.setdefault(("child", wr), []).append(run)
    for wr, node, child in node_runs.filter(child_run_id__isnull=False).values_list(
            "workflow_run_id", "node_id", "child_run_id"):
        items[(wr, node)] = items.pop(("child", child), [])
    run_ids = [r for r in run_of.values() if r] + [r for rs in items.values() for r in rs]
    first_start = dict(Attempt.objects.filter(run_id__in=run_ids, number=1)
                       .values_list("run_id", "started_at"))
    done = dict(Attempt.objects.filter(run_id__in=run_ids, outcome=AttemptOutcome.SUCCEEDED)
                .values_list("run_id", "finished_at"))
    starts, ends = {}, {}
    for key, run in run_of.items():
        if key in items:
            begun = [first_start.get(r) for r in items[key]]
            starts[key] = min(begun) if begun and None not in begun else None
            ended = [done.get(r) for r in items[key]]
            ends[key] = max(ended) if ended and None not in ended else None
        elif run is not None:
            starts[key], ends[key] = first_start.get(run), done.get(run)
    edges = list(WorkflowEdge.objects.filter(workflow_id=workflow)
                 .values_list("upstream_id", "downstream_id"))
    rule_of = dict(WorkflowNode.objects.filter(workflow_id=workflow)
                   .values_list("pk", "trigger_rule"))
    early = Counter()
    for (wr, node) in run_of:
        if node is None or (wr, node) not in starts:
            continue
        started = starts[(wr, node)]
        held = []  # per upstream: whether it finished (succeeded) before this started
        for up, down in edges:
            if down != node:
                continue
            if (wr, up) not in starts and rule_of[node] != "all_success":
                continue  # skipped: done for all_done and none_failed, no success
            finished = ends.get((wr, up))
            held.append(finished is not None and started is not None and started >= finished)
        if rule_of[node] == "one_success":
            early[(wr, node)] += not any(held)
        else:
            early[(wr, node)] += held.count(False)
    return sum(early.values())
