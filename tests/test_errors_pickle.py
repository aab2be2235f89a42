"""The scheduler's exceptions survive pickling (scheduler_core/exceptions.py): a caller's
process pool, a result backend or Django's parallel test runner pickles them, and most of
them do not take their message back as their only argument."""

import pickle

import pytest

from jobs.guards import ManagedJob
from jobs.services import InvalidJobs
from runs.tenancy.quotas import QuotaExceeded
from scheduler_core.exceptions import (
    BrokerUnavailable,
    InvalidJob,
    PermanentFailure,
    RetryAfter,
    SchedulerError,
    StaleLease,
    UnknownHandler,
)
from workflows.validation import InvalidWorkflow

ERRORS = [
    SchedulerError(), BrokerUnavailable("redis down"), StaleLease(), PermanentFailure("404"),
    InvalidJob({"priority": "must be between 0 and 9"}),
    InvalidJobs({3: {"queue": "bad"}, 7: {"name": "too long"}}),
    UnknownHandler("billing.send"), InvalidWorkflow({"nodes[0].handler": "unknown"}),
    RetryAfter(30, "rate limited"), RetryAfter(2.5),
    QuotaExceeded("max_jobs", 100, "over max_jobs 100"),
    ManagedJob(12, "a workflow's node", "paused"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_pickled_and_back_is_the_same_error(error):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)
