"""Two starts of one workflow with the same run key at the same moment start one workflow
run and both answer it (docs/workflows.md, "Starts"), with and without an owner (whose
quota check takes a per-owner lock first), on PostgreSQL."""

import pytest
from django.contrib.auth.models import User

from tests.test_workflows_races import race
from workflows import services
from workflows.models import NodeRun, WorkflowRun

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("owned", [False, True])
def test_two_starts_with_one_run_key_at_once_start_one_workflow_run(owned):
    owner = User.objects.create_user("racer") if owned else None
    wf = services.create_workflow("keyed", [{"name": "a", "handler": "noop"},
                                            {"name": "b", "handler": "noop"}],
                                  [["a", "b"]], owner=owner)
    for round_ in range(6):
        answers = []
        key = f"k{round_}"
        def start(answers=answers, key=key):
            answers.append(services.start_workflow_run(wf, run_key=key))

        errors = race(*[start] * 3)

        assert errors == []
        assert WorkflowRun.objects.filter(workflow=wf, run_key=key).count() == 1
        assert len({run.pk for run in answers}) == 1
        assert sorted(run.created for run in answers) == [False, False, True]
    assert NodeRun.objects.count() == 2 * 6
