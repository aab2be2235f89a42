"""W5's table of cron jobs, grown server-side (bench/ours.py W5; tested by
tests/test_bench_w5_load.py, so that a new NOT NULL column of jobs_job cannot break the
benchmark unseen)."""


def load_cron_jobs(cursor, upto: int, due: int) -> None:
    """Grow jobs_job to ``upto`` active cron jobs with INSERT ... SELECT generate_series (no
    row crosses the wire), then ANALYZE. Jobs 1..``due`` are ``* * * * *`` with next_run_at
    the current minute (due now); the rest ``0 0 1 1 *`` with next_run_at next New Year
    (active, never due). Every NOT NULL column without a database default is given, as
    Django's model defaults would (jobs/models/job.py).

    ``cursor``: a PostgreSQL DB-API cursor (Django's or psycopg's). Does nothing when the
    table already holds ``upto`` jobs. Raises the driver's IntegrityError if a column the
    model requires is missing here."""
    cursor.execute("SELECT coalesce(max(id), 0) FROM jobs_job")
    have = cursor.fetchone()[0]
    if have >= upto:
        return
    cursor.execute(
        "INSERT INTO jobs_schedule (id, cron, timezone, misfire_policy, max_lag_s, jitter_s) "
        "SELECT g, CASE WHEN g <= %s THEN '* * * * *' ELSE '0 0 1 1 *' END, 'UTC', "
        "'run_once', 3600, 0 FROM generate_series(%s, %s) g", [due, have + 1, upto])
    cursor.execute(
        "INSERT INTO jobs_job (id, name, handler, payload, queue, priority, status, "
        "schedule_id, next_run_at, timeout_s, max_attempts, created_at, updated_at, "
        "shard_key, unique_key, unique_states) "
        "SELECT g, 'w5-' || g, 'noop', '{}'::jsonb, 'default', 5, 'active', g, "
        "CASE WHEN g <= %s THEN date_trunc('minute', now()) "
        "ELSE date_trunc('year', now()) + interval '1 year' END, 300, 4, now(), now(), "
        "'', '', '' "
        "FROM generate_series(%s, %s) g", [due, have + 1, upto])
    for table in ("jobs_schedule", "jobs_job"):
        cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), %s)",
                       [upto])
    cursor.execute("ANALYZE jobs_schedule; ANALYZE jobs_job; ANALYZE runs_run")
