"""Which jobs are workflow nodes', for the jobs' write guard (jobs/guards.py): a node's
job makes runs only through its workflow's runs, so the jobs' API refuses to pause,
resume, cancel, trigger or edit it, naming the workflow (docs/workflows.md, "Node
jobs")."""

from workflows.models import WorkflowNode


def describe_node_jobs(job_ids: list[int], using: str) -> dict[int, str]:
    """``{job id: "node 'n' of workflow 3 ('etl')"}`` for the ids of ``job_ids`` that back
    a workflow's node (one query on the node's unique job column)."""
    rows = (WorkflowNode.objects.using(using).filter(job_id__in=job_ids)
            .values_list("job_id", "name", "workflow_id", "workflow__name"))
    return {job_id: f"node {name!r} of workflow {workflow_id} ({workflow_name!r})"
            for job_id, name, workflow_id, workflow_name in rows}
