"""The admin's paginator of the history lists (runs, dead letter, attempts, log lines):
no COUNT(*) of millions of rows for a changelist page (docs/admin.md, "Counts at
scale").

Unfiltered, a table the planner reckons holds more than EXACT_UP_TO rows gets the
planner's estimate (pg_class.reltuples, summed over the partitions of a partitioned
table). Filtered (or searched), the rows are counted up to COUNT_CAP and a count that
reaches it shows as COUNT_CAP: the pages past it are not offered (narrow the filter
instead). The admins set show_full_result_count = False, so no second, unfiltered count
is made either.
"""

from functools import cached_property

from django.core.paginator import Paginator
from django.db import connections

# Below this many rows (by the estimate) the count is exact: it is cheap there.
EXACT_UP_TO = 100_000
# At most this many rows of a filtered list are counted (2,000 pages of 50).
COUNT_CAP = 100_000


def estimated_rows(model, using: str) -> int | None:
    """The planner's row count of ``model``'s table (the sum over its partitions when
    partitioned), or None off PostgreSQL or when never analysed (reltuples -1)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(c.reltuples) FILTER (WHERE c.reltuples >= 0), "
                       "bool_and(c.reltuples < 0) FROM pg_partition_tree(%s::regclass) t "
                       "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
                       [model._meta.db_table])
        total, never = cursor.fetchone()
    return None if total is None or never else int(total)


class EstimatedCountPaginator(Paginator):
    """A Paginator whose count is estimated or capped (see the module) for a queryset of
    a history table; exact below EXACT_UP_TO rows and on SQLite."""

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not queryset.query.has_filters():
            estimate = estimated_rows(queryset.model, queryset.db)
            if estimate is not None and estimate > EXACT_UP_TO:
                return estimate
        return queryset.order_by()[:COUNT_CAP].count()
