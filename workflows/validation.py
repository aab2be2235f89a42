"""A workflow definition checked as a whole before anything is stored (docs/workflows.md,
"Validation").

``validate_workflow`` collects every problem it finds into one InvalidWorkflow whose
``errors`` map a field path (``name``, ``schedule``, ``nodes``, ``nodes[3].handler``,
``edges[7]``, ``edges``) to its reason: duplicate or bad node names, a bad ``map``
(``nodes[3].map``), an unknown trigger rule (``nodes[3].trigger_rule``, listing the
rules), each node's job fields (the jobs' own rules, jobs/validation.py, and the
owner's bounds), edges naming unknown nodes, self-edges, repeated edges, a cycle (named
node by node), and more nodes or edges than WORKFLOW_MAX_NODES / WORKFLOW_MAX_EDGES.
"""

from graphlib import CycleError, TopologicalSorter

from jobs.models import MisfirePolicy
from jobs.schedules import cron
from jobs.schedules.zones import zone_problem
from jobs.services import InvalidJobs, validate_specs
from jobs.spec import DEPRECATED, suggestion
from jobs.validation import NAME_MAX, jitter_problem, utf8
from runs.tenancy.quotas import MAX_INT
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob
from scheduler_core.text import line_problem
from scheduler_tasks.exceptions import NotATask
from scheduler_tasks.results import HANDLER as TASK_HANDLER
from scheduler_tasks.results import load_task
from workflows.execution import rules

NODE_KEYS = frozenset({"name", "handler", "task", "payload", "args", "kwargs", "queue",
                       "priority", "timeout_s", "max_attempts", "retry", "expires_in_s",
                       "rate_key", "concurrency_key", "concurrency_limit", "trigger_rule",
                       "map", "workflow"})
# The handler of a sub-workflow node's job, which never has a run (workflows/execution/subflows.py).
SUBWORKFLOW_HANDLER = "workflows.subworkflow"
# What a node's job takes as a plain job does (expires_in_s counts from when the node's
# run is made, its scheduled_at: an absolute expires_at has no place in a template).
NODE_JOB_KEYS = ("queue", "priority", "timeout_s", "max_attempts", "retry", "expires_in_s",
                 "rate_key", "concurrency_key", "concurrency_limit")
SCHEDULE_KEYS = frozenset({"cron", "timezone", "misfire_policy", "max_lag_s", "jitter_s"})


class InvalidWorkflow(InvalidJob):
    """A workflow definition is invalid; ``errors`` maps each bad field path to the
    reason. Nothing was stored."""


def _name_problem(name) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return "must be a non-empty text"
    if len(name) > NAME_MAX:
        return f"must be at most {NAME_MAX} characters"
    if "\x00" in name:
        return "must not contain NUL characters"
    if not utf8(name):
        return "must be valid Unicode text (it holds a lone UTF-16 surrogate)"
    return line_problem(name)


def _node_spec(node: dict, errors: dict, where: str, allow_tasks: bool = True) -> dict:
    """The job spec (jobs/validation.py's keys) a node's job is created from; a task node
    becomes a ``django_task`` job whose payload names the task (docs/django-tasks.md).
    Without ``allow_tasks`` (a REST client's workflow) a task node is refused, as the
    REST API refuses a ``django_task`` job (docs/security.md, "Tenants and limits")."""
    for key in sorted(set(node) - NODE_KEYS, key=str):
        errors[f"{where}.{key}"] = _unknown("node", key, NODE_KEYS)
    spec = {key: node.get(key) for key in NODE_JOB_KEYS}
    if node.get("workflow") is not None:
        return _subworkflow_spec(node, spec, errors, where)
    has_handler, has_task = node.get("handler") is not None, node.get("task") is not None
    if has_handler == has_task:
        errors[f"{where}.handler"] = "give exactly one of handler (a registered handler name) " \
                                     "or task (a django.tasks task's module path)"
        return {**spec, "handler": TASK_HANDLER, "payload": {}}
    if has_handler:
        if node["handler"] == SUBWORKFLOW_HANDLER:
            errors[f"{where}.handler"] = f"{SUBWORKFLOW_HANDLER} is internal; give workflow " \
                                         "(a workflow's id or name) instead"
        if node["handler"] == TASK_HANDLER:
            # Internal: its payload names code to run; a task node is the checked way.
            errors[f"{where}.handler"] = f"{TASK_HANDLER} is internal; name a django.tasks " \
                                         "task with task (and args, kwargs) instead"
        for key in ("args", "kwargs"):
            if key in node:
                errors[f"{where}.{key}"] = "only a task node takes args and kwargs"
        payload = node.get("payload")
        return {**spec, "handler": node["handler"], "payload": {} if payload is None else payload}
    if "payload" in node:
        errors[f"{where}.payload"] = "a task node takes args and kwargs, not a payload"
    path = node["task"]
    if not allow_tasks:
        errors[f"{where}.task"] = "a workflow made through the REST API cannot run a " \
                                  "django.tasks task (a client could run any task with " \
                                  "arguments of its choosing); give a handler, or create " \
                                  "the workflow with the Python API"
        return {**spec, "handler": TASK_HANDLER, "payload": {}}
    try:
        load_task(path)
    except (ImportError, NotATask) as exc:
        errors[f"{where}.task"] = f"a worker could not run this task: {exc}"
    args = node.get("args") or []
    kwargs = node.get("kwargs") or {}
    if not isinstance(args, list):
        errors[f"{where}.args"] = "must be a JSON array"
    if not isinstance(kwargs, dict):
        errors[f"{where}.kwargs"] = "must be a JSON object"
    return {**spec, "handler": TASK_HANDLER,
            "payload": {"task": path, "args": args, "kwargs": kwargs}}


def _subworkflow_spec(node: dict, spec: dict, errors: dict, where: str) -> dict:
    """A sub-workflow node's job spec (docs/workflows.md, "Sub-workflows"): ``workflow``
    is a workflow's id (int) or name (text), resolved against the owner's workflows at
    creation (workflows/execution/subflow_refs.py); the node takes none of handler, task, payload,
    args, kwargs or map."""
    ref = node["workflow"]
    if isinstance(ref, bool) or not isinstance(ref, int | str) or (
            isinstance(ref, str) and _name_problem(ref)) or (isinstance(ref, int) and ref < 1):
        errors[f"{where}.workflow"] = "must be a workflow's id (a positive integer) or name"
    for key in ("handler", "task", "payload", "args", "kwargs", "map"):
        if node.get(key) is not None:
            errors[f"{where}.{key}"] = "a sub-workflow node (with workflow) takes no " \
                                       f"{key}: it runs the nodes of its workflow"
    return {**spec, "handler": SUBWORKFLOW_HANDLER, "payload": {}}


def _unknown(kind: str, key, known: frozenset) -> str:
    """Why ``key`` is refused in a node or schedule: the fields, and the one probably
    meant (jobs/spec.py: max_retries for max_attempts, a misspelling)."""
    said = f"is not a {kind} field (fields: {', '.join(sorted(known))})"
    meant = suggestion(key, known) if isinstance(key, str) else None
    if meant is None:
        return said
    note = DEPRECATED[key].note if key in DEPRECATED else ""
    return f"{said}; did you mean {meant!r}?" + (f" ({note})" if note else "")


def _edge_pair(edge, errors: dict, where: str) -> tuple | None:
    """``[upstream, downstream]`` or ``{"from": upstream, "to": downstream}``."""
    if isinstance(edge, dict) and set(edge) == {"from", "to"}:
        pair = (edge["from"], edge["to"])
    elif isinstance(edge, list | tuple) and len(edge) == 2:
        pair = tuple(edge)
    else:
        errors[where] = 'must be [upstream, downstream] or {"from": upstream, "to": downstream}'
        return None
    if not all(isinstance(name, str) for name in pair):
        errors[where] = "must name two nodes by their names (text)"
        return None
    return pair


def check_graph(names: list[str], pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The problems of the graph on ``names`` with ``pairs`` (upstream, downstream) as
    edges: a cycle, named by its nodes in order (``a -> b -> c -> a``). graphlib's
    TopologicalSorter finds it (CycleError carries the nodes on one cycle)."""
    sorter = TopologicalSorter({name: set() for name in names})
    for upstream, downstream in pairs:
        sorter.add(downstream, upstream)
    try:
        sorter.prepare()
    except CycleError as exc:
        # graphlib gives the cycle with its first node repeated at the end; each node's
        # predecessor in the sorter is its upstream, so the list follows the edges.
        cycle = list(exc.args[1])
        edges = set(pairs)
        if any((a, b) not in edges for a, b in zip(cycle, cycle[1:], strict=False)):
            cycle.reverse()
        shown = " -> ".join(cycle)
        return {"edges": f"the graph has a cycle: {shown}; a workflow must be acyclic"}
    return {}


def validate_workflow(name, nodes, edges, schedule=None, *, bounds=None,
                      allow_tasks: bool = True) -> dict:
    """Check a whole workflow definition; returns ``{"name", "nodes", "edges",
    "schedule"}`` cleaned: ``nodes`` a list of job specs with their ``node`` name,
    ``trigger_rule`` and ``map`` (None or a node name; in the order given), ``edges`` a
    list of (upstream, downstream) name pairs, ``schedule`` a dict of the Schedule fields or None.

    ``nodes`` is a list of dicts ``{name, handler | task, payload (handler nodes), args and
    kwargs (task nodes), queue, priority, timeout_s, max_attempts, trigger_rule, map}``
    (``map``: the name of an upstream node whose result list this node runs over)
    (``trigger_rule``: one of workflows/execution/rules.py's RULES, default
    all_success); ``edges`` a list of
    ``[upstream, downstream]`` pairs or ``{"from": upstream, "to": downstream}`` dicts;
    ``schedule`` None, a cron expression, or a dict ``{cron, timezone, misfire_policy,
    max_lag_s, jitter_s}`` (docs/cron.md). ``bounds`` (jobs/tenants.py Bounds) are the
    owner's, applied to every node; ``allow_tasks`` False refuses task nodes (the REST
    API's rule). Raises InvalidWorkflow naming every problem.
    """
    errors: dict[str, str] = {}
    if problem := _name_problem(name):
        errors["name"] = problem
    max_nodes, max_edges = conf.get("WORKFLOW_MAX_NODES"), conf.get("WORKFLOW_MAX_EDGES")
    if not isinstance(nodes, list | tuple) or not nodes:
        raise InvalidWorkflow({**errors, "nodes": "must be a non-empty list of nodes"})
    if edges is None:
        edges = []  # no edges, as when the argument is left out
    if not isinstance(edges, list | tuple):
        raise InvalidWorkflow({**errors, "edges": "must be a list of edges"})
    if len(nodes) > max_nodes:
        errors["nodes"] = f"has {len(nodes)} nodes, more than the most a workflow may " \
                          f"have ({max_nodes}, WORKFLOW_MAX_NODES)"
    if len(edges) > max_edges:
        errors["edges"] = f"has {len(edges)} edges, more than the most a workflow may " \
                          f"have ({max_edges}, WORKFLOW_MAX_EDGES)"
    if errors.get("nodes") or errors.get("edges"):
        raise InvalidWorkflow(errors)
    names, specs, seen, trigger_rules = [], [], {}, {}
    for i, node in enumerate(nodes):
        where = f"nodes[{i}]"
        if not isinstance(node, dict):
            errors[where] = "must be an object with a name and a handler or task"
            continue
        node_name = node.get("name")
        if problem := _name_problem(node_name):
            errors[f"{where}.name"] = problem
            continue
        if node_name in seen:
            errors[f"{where}.name"] = (f"{node_name!r} is already the name of "
                                       f"nodes[{seen[node_name]}]")
            continue
        seen[node_name] = i
        names.append(node_name)
        spec = _node_spec(node, errors, where, allow_tasks)
        if problem := rules.rule_problem(node.get("trigger_rule")):
            errors[f"{where}.trigger_rule"] = problem
        trigger_rules[node_name] = node.get("trigger_rule") or rules.DEFAULT
        specs.append((i, node_name, spec))
    pairs, pair_set, known = [], set(), set(names)
    # A node whose own fields are wrong still has its name: its edges are not unknown.
    given = {node.get("name") for node in nodes
             if isinstance(node, dict) and isinstance(node.get("name"), str)}
    for i, edge in enumerate(edges):
        where = f"edges[{i}]"
        pair = _edge_pair(edge, errors, where)
        if pair is None:
            continue
        missing = [n for n in pair if n not in given]
        if missing:
            errors[where] = f"names no node called {missing[0]!r}"
        elif pair[0] == pair[1]:
            errors[where] = f"is a self-edge: {pair[0]!r} cannot wait for itself"
        elif pair in pair_set:
            errors[where] = f"repeats the edge {pair[0]!r} -> {pair[1]!r}"
        elif pair[0] in known and pair[1] in known:
            pairs.append(pair)
            pair_set.add(pair)
    maps = _maps(nodes, known, pairs, pair_set, trigger_rules, errors)
    # The valid edges' cycle is one whatever else is wrong: named with the rest, not after.
    for key, reason in check_graph(names, pairs).items():
        errors.setdefault(key, reason)
    clean_schedule = _schedule(schedule, errors)
    refs = {n["name"]: n["workflow"] for n in nodes if isinstance(n, dict)
            and n.get("workflow") is not None and isinstance(n.get("name"), str)}
    cleaned = [{**spec, "trigger_rule": trigger_rules[spec["node"]],
                "map": maps.get(spec["node"]), "workflow": refs.get(spec["node"])}
               for spec in _node_jobs(specs, bounds, errors, name)]
    if errors:
        raise InvalidWorkflow(errors)
    return {"name": name, "nodes": cleaned, "edges": pairs, "schedule": clean_schedule}


def _maps(nodes, known: set, pairs: list, pair_set: set, trigger_rules: dict,
          errors: dict) -> dict[str, str]:
    """{mapped node name: the upstream node name it maps over} of the nodes with a
    ``map`` (docs/workflows.md, "Mapped nodes"): it names another node, neither a mapped
    one nor a sub-workflow node, and the mapped node keeps the default trigger rule. The
    edge upstream -> mapped node is added to ``pairs`` when not given."""
    maps = {}
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or node.get("map") is None:
            continue
        where, over, name = f"nodes[{i}].map", node["map"], node.get("name")
        named = [n for n in nodes if isinstance(n, dict) and n.get("name") == over]
        mapped = {n.get("map") is not None for n in named}
        if not isinstance(over, str) or over not in known:
            errors[where] = f"names no node called {over!r}: give the name of the " \
                            "upstream node whose result list this node runs over"
        elif over == name:
            errors[where] = f"{name!r} cannot map over its own result"
        elif True in mapped:
            errors[where] = f"{over!r} is a mapped node itself: a map over a map is not " \
                            "offered"
        elif any(n.get("workflow") is not None for n in named):
            errors[where] = f"{over!r} is a sub-workflow node: its result is an object of " \
                            "its child's end nodes' results, never a list"
        elif trigger_rules.get(name, rules.DEFAULT) != rules.DEFAULT:
            errors[f"nodes[{i}].trigger_rule"] = f"a mapped node runs once its upstreams " \
                                                 f"succeeded: only {rules.DEFAULT}"
        elif name in known:
            maps[name] = over
            if (over, name) not in pair_set:
                pairs.append((over, name))
                pair_set.add((over, name))
    return maps


def _node_jobs(specs: list[tuple], bounds, errors: dict, workflow_name) -> list[dict]:
    """Each node's job spec checked by the jobs' own rules and the owner's bounds
    (jobs/ingest/checking.py, validate_specs); field errors land under ``nodes[i].<field>``."""
    if not specs:
        return []
    # A workflow name with a problem of its own is named under "name", not again under
    # each node's job name.
    title = workflow_name if _name_problem(workflow_name) is None else ""
    job_specs = [{**spec, "name": f"{title}/{node_name}"[-NAME_MAX:]}
                 for _, node_name, spec in specs]
    try:
        cleaned = validate_specs(job_specs, bounds)
    except InvalidJobs as exc:
        for index, fields in exc.item_errors.items():
            for field, reason in fields.items():
                errors.setdefault(f"nodes[{specs[index][0]}].{field}", reason)
        return []
    return [{**spec, "node": node_name} for spec, (_, node_name, _) in zip(
        cleaned, specs, strict=True)]


def _schedule(schedule, errors: dict) -> dict | None:
    """The Schedule fields of ``schedule`` checked as a cron job's are (jobs/validation.py,
    docs/cron.md): five-field cron or macro, IANA timezone, misfire policy, max lag and
    jitter in seconds."""
    if schedule is None:
        return None
    if isinstance(schedule, str):
        schedule = {"cron": schedule}
    if not isinstance(schedule, dict) or not schedule.get("cron"):
        errors["schedule"] = "must be a cron expression or an object with a cron field"
        return None
    unknown = sorted(set(schedule) - SCHEDULE_KEYS, key=str)
    if unknown:
        errors["schedule"] = f"{unknown[0]!r} " + _unknown("schedule", unknown[0],
                                                           SCHEDULE_KEYS)
        return None
    clean = {}
    try:
        if not isinstance(schedule["cron"], str):
            raise ValueError("must be a cron expression (text)")
        clean["cron"] = cron.normalize(schedule["cron"])
    except ValueError as exc:
        errors["schedule"] = str(exc)
    clean["timezone"] = schedule.get("timezone") or "UTC"
    if problem := zone_problem(clean["timezone"]):
        errors["schedule.timezone"] = problem
    clean["misfire_policy"] = schedule.get("misfire_policy") or MisfirePolicy.RUN_ONCE
    if clean["misfire_policy"] not in MisfirePolicy.values:
        errors["schedule.misfire_policy"] = f"must be one of {', '.join(MisfirePolicy.values)}"
    clean["max_lag_s"] = schedule.get("max_lag_s", conf.get("MAX_LAG_S"))
    if not _plain_int(clean["max_lag_s"]) or clean["max_lag_s"] < 0 \
            or clean["max_lag_s"] > MAX_INT:
        errors["schedule.max_lag_s"] = f"must be an integer from 0 to {MAX_INT} (seconds)"
    clean["jitter_s"] = schedule.get("jitter_s") or 0
    if not _plain_int(clean["jitter_s"]) or not 0 <= clean["jitter_s"] <= cron.MAX_JITTER_S:
        errors["schedule.jitter_s"] = f"must be an integer from 0 to {cron.MAX_JITTER_S} " \
                                      "(seconds)"
    elif "cron" in clean and "schedule.timezone" not in errors and (
            problem := jitter_problem(clean["cron"], clean["timezone"], clean["jitter_s"])):
        errors["schedule.jitter_s"] = problem
    return clean


def _plain_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
