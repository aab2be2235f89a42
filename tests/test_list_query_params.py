"""A list endpoint answers a query parameter it does not know with a 400 naming it, the
likely intended one and the ones it takes: DRF and django-filter dropped it silently,
so a misspelt filter answered the unfiltered list (scheduler_core/rest/query_params.py)."""

import pytest

from tests.conftest import make_runs

pytestmark = pytest.mark.django_db

LISTS = {
    "/api/jobs/": ("stauts", "status"),
    "/api/runs/": ("state_", "state"),
    "/api/dead-letter/": ("queues", "queue"),
    "/api/workflows/": ("stat", "status"),
    "/api/workflow-runs/": ("page_sise", "page_size"),
}


@pytest.mark.parametrize("path", sorted(LISTS))
def test_an_unknown_parameter_is_a_400_naming_it_and_the_one_meant(api, path):
    wrong, meant = LISTS[path]
    answer = api.get(path, {wrong: "x"})
    assert answer.status_code == 400, answer.content
    [reason] = answer.json()[wrong]
    assert f"did you mean {meant!r}" in reason
    assert meant in reason.split("this list takes ", 1)[1].split(", ")


VALUES = {"status": "active", "state": "dead", "queue": "q", "name": "n", "page_size": "10"}


@pytest.mark.parametrize("path", sorted(LISTS))
def test_the_lists_own_parameters_are_taken(api, path):
    _, meant = LISTS[path]
    answer = api.get(path, {"format": "json", "page_size": "10", meant: VALUES[meant]})
    assert answer.status_code == 200, answer.content


def test_a_runs_log_lines_take_their_cursor_and_refuse_the_rest(api, alice):
    [run] = make_runs("default", 1, owner=alice)
    assert api.get(f"/api/runs/{run.pk}/logs/", {"page_size": "5"}).status_code == 200
    answer = api.get(f"/api/runs/{run.pk}/logs/", {"levle": "ERROR"})
    assert answer.status_code == 400, answer.content
    assert "levle" in answer.json()


def test_one_objects_get_ignores_the_rule(api, alice):
    [run] = make_runs("default", 1, owner=alice)
    assert api.get(f"/api/runs/{run.pk}/", {"anything": "1"}).status_code == 200


def test_a_bad_boolean_filter_value_is_a_400_not_the_unfiltered_list(api):
    assert api.get("/api/jobs/", {"recurring": "true"}).status_code == 200
    answer = api.get("/api/jobs/", {"recurring": "yes"})
    assert answer.status_code == 400, answer.content
    assert "recurring" in answer.json()
