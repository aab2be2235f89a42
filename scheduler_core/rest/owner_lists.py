"""Run lists of one owner that stay fast beside another owner's millions of runs
(docs/api.md, "Lists at scale").

Runs carry no owner column: an owner's list joins its jobs. Ordered newest first, the
planner's cheapest-looking plan walks the run_scheduled index (scheduled_at, id) of every
owner and keeps the owner's rows; it reckons each job has the average number of runs, so
for an owner of a few jobs among another owner's 10 M runs it reads millions of rows to
fill a page. For an owner of few jobs (runs/api/views.py, OWNER_JOBS_MAX) the page is
found per job instead: each job's first rows in the list's order (its run_job_scheduled_at
index, a few rows each), merged here, and the list then restricted to the ids that can
make the page.
The rows, their order and the cursors are those of the plain query (the same DRF cursor
logic runs on the restricted set, which holds every row the page can contain).
CheckedCursor, the cursor of every run and workflow run list, builds on it.
"""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connections
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination, _reverse_ordering


def _sorted(rows: list[tuple], ordering: tuple[str, ...]) -> list[tuple]:
    """``rows`` (pk first, then one value per ``ordering`` field) in that ordering: stable
    sorts from the last field to the first, each ascending or descending."""
    for index in range(len(ordering) - 1, -1, -1):
        # (is None, value): NULLs last ascending and first descending, as PostgreSQL.
        rows.sort(key=lambda row, i=index: (row[i + 1] is None, row[i + 1]),
                  reverse=ordering[index].startswith("-"))
    return rows


def restrict_to_page(paginator: CursorPagination, queryset, request, view,
                     job_ids: list[int]):
    """``queryset`` restricted to the rows that can make the page ``request``'s cursor
    asks for, found job by job among ``job_ids`` (every job the rows can belong to).

    paginator: the CursorPagination about to paginate ``queryset`` (its ordering, page
    size and cursor decoding are used, as DRF's paginate_queryset uses them). Raises
    NotFound for an undecodable cursor, as DRF does."""
    ordering = tuple(paginator.get_ordering(request, queryset, view))
    cursor = paginator.decode_cursor(request)
    offset, reverse, position = cursor if cursor is not None else (0, False, None)
    order = tuple(_reverse_ordering(ordering)) if reverse else ordering
    base = queryset.select_related(None).prefetch_related(None).order_by(*order)
    if position is not None:  # the same bound DRF applies
        attr = ordering[0].lstrip("-")
        lookup = "lt" if reverse != ordering[0].startswith("-") else "gt"
        base = base.filter(**{f"{attr}__{lookup}": position})
    wanted = offset + paginator.get_page_size(request) + 1
    fields = [name.lstrip("-") for name in order]
    branches = [base.filter(job_id=job).values_list("pk", *fields)[:wanted]
                for job in job_ids]
    if not branches:
        return queryset.none()
    if connections[base.db].features.supports_slicing_ordering_in_compound:
        first, *others = branches
        found = list(first.union(*others, all=True) if others else first)
    else:
        # SQLite refuses LIMIT inside a UNION's members (a 500 on the embedded default):
        # one indexed query per job, a few of them (OWNER_JOBS_MAX), merged below.
        found = [row for branch in branches for row in branch]
    rows = _sorted(found, order)
    if len(rows) > wanted:
        # Rows tied with the last wanted one on every ordering field stay: which of them
        # the database puts first is its choice, made again on the restricted set.
        last = rows[wanted - 1][1:]
        rows = rows[:wanted] + [row for row in rows[wanted:] if row[1:] == last]
    return queryset.filter(pk__in=[row[0] for row in rows])


class OwnerScopedCursor(CursorPagination):
    """A CursorPagination that, for a view whose ``owner_job_ids()`` returns a list (the
    few jobs every row belongs to), pages through restrict_to_page."""

    def paginate_queryset(self, queryset, request, view=None):
        job_ids = view.owner_job_ids() if hasattr(view, "owner_job_ids") else None
        if job_ids is not None and self.get_page_size(request):
            queryset = restrict_to_page(self, queryset, request, view, job_ids)
        return super().paginate_queryset(queryset, request, view)


class CheckedCursor(OwnerScopedCursor):
    """Cursor pagination that answers 404 "Invalid cursor" for a cursor whose position is
    not a value of the ordering field (a forged or corrupted cursor), not a 500; an owner
    of few jobs pages job by job (OwnerScopedCursor)."""

    def paginate_queryset(self, queryset, request, view=None):
        try:
            return super().paginate_queryset(queryset, request, view)
        except (DjangoValidationError, ValueError, TypeError, OverflowError) as exc:
            raise NotFound(self.invalid_cursor_message) from exc
