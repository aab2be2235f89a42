"""Which jobs are a workflow's nodes, for the job lists (docs/api.md, "List and read"): a
node's job is made and run by its workflow (docs/workflows.md, "Node jobs"), so
the plain job list leaves it out unless asked, shows the workflow's id beside it, and
never calls it ``finished`` between two workflow runs.

jobs/ never imports workflows/ (tests/test_import_graph.py): the relation is reached by
its name, ``workflow_node``, when the optional workflows app is installed.
"""

from django.apps import apps
from django.db.models import F, Q, QuerySet, Value

NODE = "workflow_node"


def installed() -> bool:
    """Whether the workflows app (and so the ``workflow_node`` relation) is installed."""
    return apps.is_installed("workflows")


def node_q() -> Q:
    """A Q matching the jobs that are some workflow's node (none without the app)."""
    return Q(**{f"{NODE}__isnull": False}) if installed() else Q(pk__in=[])


def with_workflow(jobs: QuerySet) -> QuerySet:
    """``jobs`` annotated with ``node_workflow_id``: the id of the workflow the job is a
    node of, else None."""
    value = F(f"{NODE}__workflow_id") if installed() else Value(None)
    return jobs.annotate(node_workflow_id=value)


def workflow_of(job) -> int | None:
    """The id of the workflow ``job`` is a node of, else None: its annotation when it came
    from ``with_workflow``, else one query."""
    if hasattr(job, "node_workflow_id"):
        return job.node_workflow_id
    if not installed() or job.pk is None:
        return None
    return type(job).objects.filter(pk=job.pk).values_list(
        f"{NODE}__workflow_id", flat=True).first()


def plain(jobs: QuerySet) -> QuerySet:
    """``jobs`` without the workflows' node jobs."""
    return jobs.exclude(node_q())


def of_workflow(jobs: QuerySet, workflow_id: int) -> QuerySet:
    """The node jobs of workflow ``workflow_id`` among ``jobs``."""
    if not installed():
        return jobs.none()
    return jobs.filter(**{f"{NODE}__workflow_id": workflow_id})
