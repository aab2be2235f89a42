"""POST /api/jobs/{id}/backfill/ (docs/api.md, "Backfill"): a run for each past
occurrence of a cron job in ``[start, end)`` that has none (jobs/schedules/backfill.py). The
view is the job viewset's, so owner isolation is exactly a trigger's
(scheduler_core/rest/permissions.py): another owner's job answers 404, or 403 naming
``jobs.change_job`` to one who may see it. The body's and answer's shapes are shared with POST
/api/workflows/{id}/backfill/ (workflows/api/backfill.py).
"""

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from jobs.api.jobs import JobViewSet
from jobs.api.serializers import StrictFieldsMixin, api_errors
from jobs.schedules.backfill import backfill_job
from jobs.tenants import QuotaExceeded
from scheduler_core.exceptions import InvalidJob, SchedulerError
from scheduler_core.rest.errors import (
    COMMON,
    FIELD_ERRORS,
    Conflict,
    DetailSerializer,
    QuotaRefused,
)

MOMENT_HELP = ("ISO 8601 date-time or date; without a UTC offset it is read in the "
               "schedule's timezone")


class BackfillRequestSerializer(StrictFieldsMixin, serializers.Serializer):
    """The body: the range ``[start, end)``, start inclusive, end exclusive."""

    start = serializers.CharField(help_text=f"first moment, inclusive: {MOMENT_HELP}")
    end = serializers.CharField(help_text=f"last moment, exclusive: {MOMENT_HELP}")


class BackfillResultSerializer(serializers.Serializer):
    """What a backfill made: ``occurrences`` in the range (at or before now), ``made``
    new runs, ``skipped`` occurrences that had a run already."""

    backfill = serializers.IntegerField(help_text="the backfill record's id (admin)")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    occurrences = serializers.IntegerField()
    made = serializers.IntegerField()
    skipped = serializers.IntegerField()


EXAMPLE = OpenApiExample("one day", request_only=True,
                         value={"start": "2026-03-01T00:00:00Z", "end": "2026-03-02"})


def backfill_schema(what: str):
    """The OpenAPI description of a backfill endpoint of ``what`` ("job", "workflow")."""
    return extend_schema(
        summary=f"Make the runs of a cron {what}'s past occurrences in [start, end) that "
                f"have none (idempotent, bounded)",
        request=BackfillRequestSerializer, examples=[EXAMPLE],
        responses={200: BackfillResultSerializer, 400: FIELD_ERRORS,
                   409: DetailSerializer, **COMMON})


def run_backfill(request, pk: int, backfill) -> Response:
    """Validate the body of ``request`` and call ``backfill(pk, start, end,
    requested_by=user)``; answer 200 with the counts, 400 naming the field, 403 for a
    quota (jobs/api/jobs.py, QuotaRefused), 409 for a target that cannot be backfilled."""
    incoming = BackfillRequestSerializer(data=request.data)
    incoming.is_valid(raise_exception=True)
    data = incoming.validated_data
    try:
        record = backfill(pk, data["start"], data["end"], requested_by=request.user)
    except InvalidJob as exc:
        raise ValidationError(api_errors(exc.errors)) from exc
    except QuotaExceeded as exc:
        raise QuotaRefused(exc) from exc
    except SchedulerError as exc:
        raise Conflict(str(exc)) from exc
    return Response(BackfillResultSerializer({
        "backfill": record.pk, "start": record.start, "end": record.end,
        "occurrences": record.total, "made": record.made, "skipped": record.skipped}).data)


class JobBackfillViewSet(JobViewSet):
    """The job viewset with one more verb, routed at /api/jobs/{id}/backfill/."""

    @backfill_schema("job")
    def backfill(self, request, pk=None):
        job = self.get_object()
        return run_backfill(request, job.pk, backfill_job)
