"""Trigger rules: when a node runs, given the states of its direct upstream node runs in
the same workflow run (docs/workflows.md, "Trigger rules"; Airflow's rules of the same
names are the reference).

Each rule has two sides, kept here together:

* **ready**: the node gets its run. Written once as data (ALL_OF, ANY_OF) and read by
  the three readiness reads: the ORM's (``ready_q``), ready_pg's SQL (``ready_sql``)
  and the one-call ack's (workflows/sql/ack_succeeded.sql, by hand).
  tests/test_workflows_rules.py holds ``verdict`` and the data equal.
* **dead**: the rule can no longer hold, whatever the upstreams still running do. The
  node becomes ``upstream_failed`` when a failure decided it, else ``skipped`` (an
  ``all_failed`` node once an upstream succeeded, a ``one_failed`` node once all
  succeeded). ``verdict`` decides; workflows/graph.py marks.

A node without upstreams runs at once, whatever its rule.
"""

from django.db.models import Exists, OuterRef, Q

from workflows.models import NodeRun, NodeState, WorkflowEdge

ALL_SUCCESS = "all_success"
ALL_FAILED = "all_failed"
ALL_DONE = "all_done"
ONE_SUCCESS = "one_success"
ONE_FAILED = "one_failed"
NONE_FAILED = "none_failed"
DEFAULT = ALL_SUCCESS
RULES = (ALL_SUCCESS, ALL_DONE, ALL_FAILED, ONE_SUCCESS, ONE_FAILED, NONE_FAILED)
RULE_MAX = 16  # characters of the stored field

# An upstream that did not succeed by its own run (cancelled counts as failed, as it
# always has for all_success), or that will not run because of one.
FAILED_STATES = (NodeState.FAILED, NodeState.CANCELLED, NodeState.UPSTREAM_FAILED)
LIVE = (NodeState.PENDING, NodeState.RUNNING)
DONE = (NodeState.SUCCEEDED, NodeState.FAILED, NodeState.CANCELLED,
        NodeState.UPSTREAM_FAILED, NodeState.SKIPPED)

# ready when every upstream is in the rule's states ...
ALL_OF = {ALL_SUCCESS: (NodeState.SUCCEEDED,), ALL_FAILED: FAILED_STATES, ALL_DONE: DONE,
          NONE_FAILED: (NodeState.SUCCEEDED, NodeState.SKIPPED)}
# ... or when one is (no more wait: the others may still be running)
ANY_OF = {ONE_SUCCESS: (NodeState.SUCCEEDED,), ONE_FAILED: FAILED_STATES}
# Rules an upstream's success can make dead: an ack checks these (ack.py, nodes_succeeded).
KILLED_BY_SUCCESS = (ALL_FAILED, ONE_FAILED)

READY = "ready"


def rule_problem(rule) -> str | None:
    """Why ``rule`` is not a trigger rule, or None (None itself is the default)."""
    if rule is None or (isinstance(rule, str) and rule in RULES):
        return None
    return (f"{rule!r} is not a trigger rule; the rules are: {', '.join(RULES)} "
            f"(default {DEFAULT})")


def verdict(rule: str, states: list[str]) -> str | None:
    """What a pending node with trigger ``rule`` does, given its upstream node runs'
    ``states`` (NodeState values): READY (it gets its run), NodeState.UPSTREAM_FAILED or
    NodeState.SKIPPED (its rule can no longer hold), or None (it waits)."""
    if not states:
        return READY
    succeeded = states.count(NodeState.SUCCEEDED)
    skipped = states.count(NodeState.SKIPPED)
    failed = sum(s in FAILED_STATES for s in states)
    live = sum(s in LIVE for s in states)
    if rule == ALL_DONE:
        return None if live else READY
    if rule == ALL_FAILED:
        if succeeded or skipped:
            return NodeState.SKIPPED
        return None if live else READY
    if rule == ONE_SUCCESS:
        if succeeded:
            return READY
        if live:
            return None
        return NodeState.SKIPPED if skipped == len(states) else NodeState.UPSTREAM_FAILED
    if rule == ONE_FAILED:
        if failed:
            return READY
        return None if live else NodeState.SKIPPED
    if failed:  # all_success, none_failed
        return NodeState.UPSTREAM_FAILED
    if rule == ALL_SUCCESS and skipped:
        return NodeState.SKIPPED
    return None if live else READY


def ready_q() -> Q:
    """A filter over NodeRun rows (their node's rule and their upstream node runs in the
    same workflow run) that holds when the rule says the node is ready."""
    def ups():
        return NodeRun.objects.filter(workflow_run_id=OuterRef("workflow_run_id"),
                                      node__downstream_edges__downstream_id=OuterRef("node_id"))

    no_ups = ~Exists(WorkflowEdge.objects.filter(downstream_id=OuterRef("node_id")))
    q = Q()
    for rule, states in ALL_OF.items():
        q |= Q(node__trigger_rule=rule) & ~Exists(ups().exclude(state__in=states))
    for rule, states in ANY_OF.items():
        q |= Q(node__trigger_rule=rule) & (Exists(ups().filter(state__in=states)) | no_ups)
    return q


def _array(states) -> str:
    return "ARRAY[" + ", ".join(f"'{s}'" for s in states) + "]::text[]"


def ready_sql(n: str, wn: str, node_runs: str, edges: str) -> str:
    """The ready condition as PostgreSQL, for node run alias ``n`` and its node's alias
    ``wn``, the node runs' and edges' tables ``node_runs`` and ``edges``. The states are
    constants of this module, never input. The default rule's branch is the NOT EXISTS
    the engine has always read, first; a rule no way in stores is never ready."""
    up = (f"SELECT 1 FROM {node_runs} AS u JOIN {edges} AS e ON e.upstream_id = u.node_id"
          f" WHERE u.workflow_run_id = {n}.workflow_run_id AND e.downstream_id = {n}.node_id")
    no_ups = f"NOT EXISTS (SELECT 1 FROM {edges} AS e WHERE e.downstream_id = {n}.node_id)"
    branches = [f"WHEN '{rule}' THEN (EXISTS ({up} AND u.state::text = ANY({_array(states)}))"
                f" OR {no_ups})" for rule, states in ANY_OF.items()]
    branches += [f"WHEN '{rule}' THEN NOT EXISTS ({up} AND NOT (u.state::text ="
                 f" ANY({_array(states)})))" for rule, states in ALL_OF.items()
                 if rule != DEFAULT]
    default = f"WHEN '{DEFAULT}' THEN NOT EXISTS ({up} AND u.state <> '{NodeState.SUCCEEDED}')"
    return f"(CASE {wn}.trigger_rule {default} {' '.join(branches)} ELSE false END)"
