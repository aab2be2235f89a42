-- workflows_ack_succeeded: the ack of workflow nodes' successes in one call on
-- PostgreSQL (workflows/execution/ack_pg.py calls it; docs/workflows.md, "Latency").
--
-- Why the ack exists twice. workflows/execution/ack.py (nodes_succeeded) is the rule book: it
-- serves SQLite, an ack inside a caller's transaction, starts, resumes and the reconcile,
-- and every case this function leaves to it. This function replays the common case of
-- that Python path, statement for statement, in one round trip, which is what keeps a
-- chain's handoff fast (BENCHMARKS.md, "Workflows (W7)"). What it does not do itself (a
-- node of a cancelled job, a schedule's jitter still ahead, a workflow run that ends
-- failed, a mapped node's item or a mapped node below, a sub-workflow node below, a
-- child workflow run's end, an all_failed node below that does not start, a one_failed
-- one that may no longer) raises SQLSTATE WFA01, which undoes the whole call; the
-- caller then acks through engine.py. tests/test_workflows_ack_paths.py runs the same scenarios through
-- both and compares every row they leave.
--
-- In order: (1) the runs and their attempts succeed, fenced on (id, attempt, running);
-- (2) their node runs succeed; (3) the pending node runs below them are locked, in id
-- order, and (4) those ready are read in a statement of their own, so the lock-then-read
-- rule of docs/workflows.md, "The rules", holds (each statement of a VOLATILE function
-- takes its own snapshot under READ COMMITTED); (5) their runs are inserted and the node
-- runs pointed at them; (6) those the acking worker offered to run at once are leased to
-- it (runs/execution/continuation.py); (7) the workflow runs that are done end. Steps 2
-- to 7 run in a block with an EXCEPTION clause (a subtransaction, as the listeners of
-- runs/execution/hooks.py have): their error comes back as a row and the runs' ack stands.
--
-- Returned rows, by o_kind: 'acked' (o_id, o_attempt) per run acked; 'leased' per run
-- continued on p_worker, with its task; 'pushed' per run made ready and left to the
-- broker; 'error' (o_handler: the SQLSTATE and message) when steps 2 to 7 failed.
-- o_trace: a leased run's trace context (NULL on the other rows).
--
-- Applied whole by a migration (workflows/sql/__init__.py); to change it, edit this file
-- and add a migration that applies it again.

-- p_ids, p_attempts, p_results: the runs acked and their results (JSON text or NULL).
-- p_worker, p_queues, p_room, p_ttl_s: the acking worker's offer
-- (runs/execution/continuation.py); p_room 0 continues nothing. p_limited: queues with
-- a limit a lease applies; p_owner_limited: OWNER_CONCURRENCY is set. p_shards: SHARDS.
-- p_urgent_queues,
-- p_urgent_priorities: the broker's most urgent waiting priority per queue (Redis), or
-- NULL to read the ready runs from the runs table here (the database broker).
-- p_traces: per run of p_ids, the W3C traceparent of its ack's span (or NULL), which the
-- runs this ack makes store as their trace context (docs/tracing.md, "Workflows"); NULL
-- when the caller traces nothing, which costs nothing here.
CREATE OR REPLACE FUNCTION workflows_ack_succeeded(
    p_ids bigint[], p_attempts int[], p_results text[], p_worker text, p_queues text[],
    p_room int, p_ttl_s float8, p_limited text[], p_owner_limited boolean, p_shards int,
    p_urgent_queues text[], p_urgent_priorities int[], p_traces text[])
RETURNS TABLE (o_kind text, o_id bigint, o_attempt int, o_queue text, o_shard int,
               o_priority int, o_run_at timestamptz, o_owner bigint, o_expires_us bigint,
               o_job bigint, o_scheduled_us bigint, o_handler text, o_payload text,
               o_timeout int, o_trace text)
LANGUAGE plpgsql VOLATILE
-- A handoff's few rows: each statement's plan made once per connection, not at every
-- call (with the runs' tables partitioned, a custom plan per call planned every
-- partition each time, 2-3x the statements' own cost). Batches of more rows plan each
-- statement for its arrays (below): a generic plan joined a fan-out's 998 new runs to
-- their node runs in nested loops (BENCHMARKS.md, "Workflows (W7)").
SET plan_cache_mode = force_generic_plan
-- Every statement finds its rows by key, for which an index is right at any size. With
-- statistics taken when every node run had succeeded, step 4's NOT EXISTS was planned as
-- a scan of all node runs per candidate: a root with 998 downstream nodes read a million
-- rows (tests/test_workflows_stale_stats.py). Off only penalises a sequential scan.
SET enable_seqscan = off
AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_acked bigint[];
  v_acked_at int[];
  v_wruns bigint[];
  v_nodes bigint[];
  v_down bigint[];
  v_locked bigint[];
  v_doomed bigint[];
  v_running bigint[] := '{}';
  v_take bigint[];
  v_error text;
  r record;
  -- the ready node runs
  a_nid bigint[] := '{}'; a_job bigint[] := '{}'; a_sched timestamptz[] := '{}';
  a_run_at timestamptz[] := '{}'; a_queue text[] := '{}'; a_shard int[] := '{}';
  a_prio int[] := '{}'; a_max int[] := '{}';
  a_trace text[] := '{}';  -- empty: every run made stores no trace context
  -- the runs made and still pending
  f_id bigint[] := '{}'; f_queue text[] := '{}'; f_shard int[] := '{}';
  f_prio int[] := '{}'; f_run_at timestamptz[] := '{}'; f_owner bigint[] := '{}';
  -- the runs leased to p_worker
  l_id bigint[] := '{}'; l_attempt int[] := '{}'; l_queue text[] := '{}';
  l_shard int[] := '{}'; l_exp bigint[] := '{}'; l_job bigint[] := '{}';
  l_sched bigint[] := '{}'; l_handler text[] := '{}'; l_payload text[] := '{}';
  l_timeout int[] := '{}'; l_owner bigint[] := '{}'; l_trace text[] := '{}';
BEGIN
  IF cardinality(p_ids) > 8 THEN
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);  -- until the return
  END IF;
  -- (1) The runs' ack, fenced on (id, attempt, running): runs/execution/completion.py,
  -- _succeed. A row a concurrent reap holds is re-checked against the fence once its lock
  -- is granted.
  WITH v AS (SELECT * FROM unnest(p_ids, p_attempts, p_results) AS v(id, number, result)),
  done AS (
    UPDATE runs_run AS rr SET state = 'succeeded', finished_at = v_now,
        result = v.result::jsonb, lease_expires_at = NULL, error = ''
    FROM v WHERE rr.id = v.id AND rr.attempt = v.number AND rr.state = 'running'
    RETURNING rr.id, rr.attempt, v.result),
  att AS (
    UPDATE runs_attempt AS a SET finished_at = v_now, outcome = 'succeeded',
        result = done.result::jsonb
    FROM done WHERE a.run_id = done.id AND a.number = done.attempt)
  SELECT array_agg(done.id), array_agg(done.attempt) INTO v_acked, v_acked_at FROM done;
  IF v_acked IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY SELECT 'acked'::text, x.id, x.attempt, NULL::text, NULL::int, NULL::int,
      NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
      NULL::text, NULL::text, NULL::int, NULL::text
    FROM unnest(v_acked, v_acked_at) AS x(id, attempt);

  BEGIN
    -- A mapped node's item, or a mapped node below, is the engine's (workflows/execution/items.py,
    -- workflows/execution/fanout.py; docs/workflows.md, "Mapped nodes").
    IF EXISTS (SELECT 1 FROM workflows_mapitem WHERE run_id = ANY(v_acked)) THEN
      RAISE EXCEPTION 'a mapped node''s item run' USING ERRCODE = 'WFA01';
    END IF;
    -- (2) workflows/execution/ack.py nodes_succeeded: the node runs succeed ...
    WITH s AS (
      UPDATE workflows_noderun SET state = 'succeeded', finished_at = v_now, error = ''
      WHERE run_id = ANY(v_acked) AND state = 'running'
      RETURNING workflow_run_id, node_id)
    SELECT array_agg(DISTINCT s.workflow_run_id), array_agg(DISTINCT s.node_id)
      INTO v_wruns, v_nodes FROM s;
    IF v_wruns IS NULL THEN
      RETURN;
    END IF;
    -- (3) ... the pending node runs below them are locked, in id order (ready_pg.lock_below),
    -- looked up by (workflow run, node): as a subquery, the plan walked every node run
    -- of the workflow run, a chain's every hop (edges never change once stored) ...
    v_down := ARRAY(SELECT e.downstream_id FROM workflows_workflowedge AS e
                    WHERE e.upstream_id = ANY(v_nodes));
    IF EXISTS (SELECT 1 FROM workflows_workflownode AS m
               WHERE m.id = ANY(v_down) AND m.map_over_id IS NOT NULL) THEN
      RAISE EXCEPTION 'a mapped node below' USING ERRCODE = 'WFA01';
    END IF;
    -- A sub-workflow node below starts a workflow run (workflows/execution/subflows.py).
    IF EXISTS (SELECT 1 FROM workflows_workflownode AS m
               WHERE m.id = ANY(v_down) AND m.subworkflow_id IS NOT NULL) THEN
      RAISE EXCEPTION 'a sub-workflow node below' USING ERRCODE = 'WFA01';
    END IF;
    v_locked := ARRAY(
      SELECT n.id FROM workflows_noderun AS n
      WHERE n.workflow_run_id = ANY(v_wruns) AND n.node_id = ANY(v_down)
        AND n.state = 'pending'
      ORDER BY n.id FOR UPDATE OF n);
    -- Those whose rule this success may have made fail (engine.settle marks them): an
    -- all_failed node, a one_failed one with no upstream left to fail. Unless ready,
    -- they are left to the engine.
    v_doomed := ARRAY(
      SELECT n.id FROM workflows_noderun AS n
      JOIN workflows_workflownode AS wn ON wn.id = n.node_id
      WHERE n.id = ANY(v_locked) AND (wn.trigger_rule = 'all_failed'
        OR wn.trigger_rule = 'one_failed' AND NOT EXISTS (
          SELECT 1 FROM workflows_noderun AS u
          JOIN workflows_workflowedge AS e ON e.upstream_id = u.node_id
          WHERE u.workflow_run_id = n.workflow_run_id AND e.downstream_id = n.node_id
            AND u.state IN ('pending', 'running'))));
    -- (4) ... and, in a statement of its own, those ready are read (ready_pg.ready_rows).
    -- A case engine._start or engine.start_time handles otherwise is left to it (WFA01).
    IF cardinality(v_locked) > 0 THEN
      FOR r IN
        SELECT n.id AS nid, wr.scheduled_at, wr.started_by, s.jitter_s, j.id AS jid,
               j.queue, j.priority, j.max_attempts, j.shard_key, j.handler, j.status
        FROM workflows_noderun AS n
        JOIN workflows_workflowrun AS wr ON wr.id = n.workflow_run_id
        JOIN workflows_workflow AS w ON w.id = wr.workflow_id
        LEFT JOIN jobs_schedule AS s ON s.id = w.schedule_id
        JOIN workflows_workflownode AS wn ON wn.id = n.node_id
        JOIN jobs_job AS j ON j.id = wn.job_id
        WHERE n.id = ANY(v_locked) AND n.state = 'pending' AND wr.state = 'running'
          -- the node's trigger rule holds (workflows/execution/rules.py, ready_sql: the same; a
          -- candidate here has an upstream, so one_* need no case without one)
          AND CASE wn.trigger_rule
            WHEN 'all_success' THEN NOT EXISTS (
              SELECT 1 FROM workflows_noderun AS u
              JOIN workflows_workflowedge AS e ON e.upstream_id = u.node_id
              WHERE u.workflow_run_id = n.workflow_run_id AND e.downstream_id = n.node_id
                AND u.state <> 'succeeded')
            WHEN 'one_success' THEN EXISTS (
              SELECT 1 FROM workflows_noderun AS u
              JOIN workflows_workflowedge AS e ON e.upstream_id = u.node_id
              WHERE u.workflow_run_id = n.workflow_run_id AND e.downstream_id = n.node_id
                AND u.state = 'succeeded')
            WHEN 'one_failed' THEN EXISTS (
              SELECT 1 FROM workflows_noderun AS u
              JOIN workflows_workflowedge AS e ON e.upstream_id = u.node_id
              WHERE u.workflow_run_id = n.workflow_run_id AND e.downstream_id = n.node_id
                AND u.state IN ('failed', 'cancelled', 'upstream_failed'))
            ELSE NOT EXISTS (
              SELECT 1 FROM workflows_noderun AS u
              JOIN workflows_workflowedge AS e ON e.upstream_id = u.node_id
              WHERE u.workflow_run_id = n.workflow_run_id AND e.downstream_id = n.node_id
                AND NOT (u.state::text = ANY(CASE wn.trigger_rule
                  WHEN 'all_failed' THEN ARRAY['failed', 'cancelled', 'upstream_failed']
                  WHEN 'all_done' THEN ARRAY['succeeded', 'failed', 'cancelled',
                                             'upstream_failed', 'skipped']
                  WHEN 'none_failed' THEN ARRAY['succeeded', 'skipped']
                  ELSE ARRAY[]::text[] END)))
          END
        ORDER BY n.id
      LOOP
        IF r.status = 'cancelled' THEN
          RAISE EXCEPTION 'node run % has a cancelled job', r.nid USING ERRCODE = 'WFA01';
        END IF;
        IF r.started_by = 'schedule' AND COALESCE(r.jitter_s, 0) > 0
            AND r.scheduled_at + r.jitter_s * interval '1 second' > v_now THEN
          RAISE EXCEPTION 'node run % may wait for its jitter', r.nid USING ERRCODE = 'WFA01';
        END IF;
        v_doomed := array_remove(v_doomed, r.nid);
        a_nid := a_nid || r.nid;
        a_job := a_job || r.jid;
        a_sched := a_sched || r.scheduled_at;
        a_run_at := a_run_at || GREATEST(r.scheduled_at, v_now);
        a_queue := a_queue || r.queue::text;
        a_shard := a_shard || CASE WHEN p_shards > 1 THEN
            (workflows_crc32(COALESCE(NULLIF(r.shard_key, ''), r.handler)) % p_shards)::int
            ELSE 0 END;
        a_prio := a_prio || r.priority;
        a_max := a_max || r.max_attempts;
      END LOOP;
    END IF;
    IF cardinality(v_doomed) > 0 THEN
      RAISE EXCEPTION 'node run % may no longer hold its rule', v_doomed[1]
        USING ERRCODE = 'WFA01';
    END IF;
    IF cardinality(a_nid) > 8 THEN
      PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    -- Each run made continues the trace of the acked upstream whose ack released it (of
    -- a join's upstreams acked together, the lowest run id's): engine._make_runs, with
    -- workflows/execution/tracing.py's released. Only when the caller traces.
    IF p_traces IS NOT NULL AND cardinality(a_nid) > 0 THEN
      a_trace := ARRAY(
        SELECT (SELECT t.trace FROM unnest(p_ids, p_traces) AS t(id, trace)
                JOIN workflows_noderun AS u ON u.run_id = t.id
                JOIN workflows_workflowedge AS e ON e.upstream_id = u.node_id
                WHERE u.workflow_run_id = n.workflow_run_id AND e.downstream_id = n.node_id
                  AND t.trace IS NOT NULL
                ORDER BY t.id LIMIT 1)
        FROM unnest(a_nid) WITH ORDINALITY AS x(nid, i)
        JOIN workflows_noderun AS n ON n.id = x.nid
        ORDER BY x.i);
    END IF;
    IF cardinality(a_nid) > 0 THEN
      -- (5) engine._make_runs: the runs inserted (or found: UNIQUE (job, scheduled_at)) and
      -- their node runs pointed at them; the existing rows are read in the INSERT's own
      -- snapshot, so each run comes once, from one side or the other.
      WITH v AS (
        SELECT * FROM unnest(a_nid, a_job, a_sched, a_run_at, a_queue, a_shard, a_prio,
                             a_max, a_trace)
          AS v(nid, job_id, scheduled_at, run_at, queue, shard, priority, max_attempts,
               trace)),
      made AS (
        INSERT INTO runs_run (job_id, scheduled_at, run_at, jitter_s, state, queue, shard,
                              priority, attempt, max_attempts, worker_id, created_at, error,
                              catch_up, trace_context)
        SELECT v.job_id, v.scheduled_at, v.run_at, 0, 'scheduled', v.queue, v.shard,
               v.priority, 0, v.max_attempts, '', v_now, '', false, v.trace FROM v
        ON CONFLICT DO NOTHING
        RETURNING id, job_id, scheduled_at, queue, shard, priority, run_at, state),
      found AS (
        SELECT * FROM made
        UNION ALL
        SELECT rr.id, rr.job_id, rr.scheduled_at, rr.queue, rr.shard, rr.priority,
               rr.run_at, rr.state
        FROM runs_run AS rr JOIN v ON rr.job_id = v.job_id AND rr.scheduled_at = v.scheduled_at),
      paired AS (
        SELECT v.nid, f.id, f.queue, f.shard, f.priority, f.run_at, f.state,
               (SELECT owner_id FROM jobs_job WHERE id = f.job_id) AS owner_id
        FROM found AS f JOIN v ON v.job_id = f.job_id AND v.scheduled_at = f.scheduled_at),
      pointed AS (
        UPDATE workflows_noderun AS n SET state = 'running', run_id = p.id, ready_at = v_now,
            error = ''
        FROM paired AS p WHERE n.id = ANY(a_nid) AND n.id = p.nid AND n.state = 'pending'
        RETURNING n.workflow_run_id)
      SELECT ARRAY(SELECT DISTINCT workflow_run_id FROM pointed),
             COALESCE(array_agg(p.id ORDER BY p.id), '{}'),
             COALESCE(array_agg(p.queue::text ORDER BY p.id), '{}'),
             COALESCE(array_agg(p.shard ORDER BY p.id), '{}'),
             COALESCE(array_agg(p.priority ORDER BY p.id), '{}'),
             COALESCE(array_agg(p.run_at ORDER BY p.id), '{}'),
             COALESCE(array_agg(p.owner_id ORDER BY p.id), '{}')
        INTO v_running, f_id, f_queue, f_shard, f_prio, f_run_at, f_owner
        FROM paired AS p WHERE p.state IN ('scheduled', 'queued', 'retrying');
      -- (6) runs/execution/continuation.py: of the runs made ready, those the acking
      -- worker offered to run at once (due now, a queue it serves, no limit a lease would apply, none
      -- behind a more urgent one: continuation.choose), up to its room, in the lease's
      -- order, leased to it by the lease's own statement (leases.start_statement).
      v_take := ARRAY(
        WITH made AS (
          SELECT * FROM unnest(f_id, f_queue, f_run_at, f_owner, f_prio)
            AS m(id, queue, run_at, owner_id, priority)),
        -- the most urgent priority, per queue, of the runs made due now that a lease would
        -- hold to their owner's limit, which this ack leaves to the broker: read once
        held AS (
          SELECT y.queue, min(y.priority) AS priority FROM made AS y
          WHERE y.run_at <= v_now AND y.owner_id IS NOT NULL AND (p_owner_limited OR EXISTS (
            SELECT 1 FROM jobs_ownerpolicy AS o
            WHERE o.owner_id = y.owner_id AND o.max_running IS NOT NULL))
          GROUP BY y.queue)
        SELECT x.id FROM made AS x
        WHERE x.run_at <= v_now AND x.queue = ANY(p_queues) AND NOT (x.queue = ANY(p_limited))
          AND (x.owner_id IS NULL OR (NOT p_owner_limited AND NOT EXISTS (
            SELECT 1 FROM jobs_ownerpolicy AS o
            WHERE o.owner_id = x.owner_id AND o.max_running IS NOT NULL)))
          -- no more urgent run waits ready in the queue: the lease's order
          AND CASE WHEN p_urgent_queues IS NULL THEN NOT EXISTS (
                SELECT 1 FROM runs_run AS q JOIN jobs_job AS qj ON qj.id = q.job_id
                WHERE q.state = 'queued' AND q.queue = x.queue AND q.priority < x.priority
                  AND qj.status = 'active')
              ELSE NOT EXISTS (
                SELECT 1 FROM unnest(p_urgent_queues, p_urgent_priorities) AS u(queue, prio)
                WHERE u.queue = x.queue AND u.prio < x.priority) END
          -- nor is a more urgent run this ack makes in the queue left to the broker (its
          -- owner's limit): runs/execution/continuation.py, choose
          AND NOT EXISTS (
            SELECT 1 FROM held AS h WHERE h.queue = x.queue AND h.priority < x.priority)
        ORDER BY x.priority, x.run_at, x.id LIMIT GREATEST(p_room, 0));
      IF cardinality(v_take) > 0 THEN
        FOR r IN
          WITH t AS (SELECT clock_timestamp() AS now),
          started AS (
            UPDATE runs_run SET state = 'running', attempt = runs_run.attempt + 1,
                worker_id = p_worker, lease_expires_at = t.now + p_ttl_s * interval '1 second',
                started_at = t.now
            FROM t
            WHERE runs_run.id = ANY(v_take)
              AND (runs_run.state || '') = ANY('{scheduled,queued,retrying}')
              AND (SELECT status FROM jobs_job WHERE id = runs_run.job_id) = 'active'
            RETURNING runs_run.id, runs_run.attempt, runs_run.queue, runs_run.shard,
                      runs_run.started_at, runs_run.lease_expires_at, runs_run.job_id,
                      runs_run.scheduled_at, runs_run.trace_context),
          attempts AS (
            INSERT INTO runs_attempt (run_id, run_scheduled_at, number, worker_id, started_at,
                                      outcome, error)
            SELECT id, scheduled_at, attempt, p_worker, started_at, 'running', '' FROM started)
          SELECT st.id, st.attempt, st.queue, st.shard,
                 (EXTRACT(EPOCH FROM st.lease_expires_at) * 1000000)::bigint AS exp,
                 st.job_id, (EXTRACT(EPOCH FROM st.scheduled_at) * 1000000)::bigint AS sched,
                 j.handler, j.payload::text AS payload, j.timeout_s, j.owner_id,
                 st.trace_context AS trace
          FROM started AS st
          CROSS JOIN LATERAL (SELECT handler, payload, timeout_s, owner_id FROM jobs_job
                              WHERE id = st.job_id OFFSET 0) AS j
          ORDER BY st.id
        LOOP
          l_id := l_id || r.id; l_attempt := l_attempt || r.attempt;
          l_queue := l_queue || r.queue::text; l_shard := l_shard || r.shard;
          l_exp := l_exp || r.exp; l_job := l_job || r.job_id; l_sched := l_sched || r.sched;
          l_handler := l_handler || r.handler::text; l_payload := l_payload || r.payload;
          l_timeout := l_timeout || r.timeout_s; l_owner := l_owner || r.owner_id;
          l_trace := l_trace || r.trace::text;
        END LOOP;
      END IF;
    END IF;
    -- (7) engine.finish_if_done, for the workflow runs in which no node has just started; a
    -- paused one is left paused (its resume decides its outcome).
    FOR r IN SELECT w.id FROM unnest(v_wruns) AS w(id)
             WHERE NOT (w.id = ANY(v_running)) ORDER BY w.id LOOP
      -- Held before its nodes are read (engine.finish_if_done says why): a concurrent ack
      -- of its other last node commits first, and the reads below see it.
      PERFORM 1 FROM workflows_workflowrun WHERE id = r.id FOR UPDATE;
      CONTINUE WHEN EXISTS (SELECT 1 FROM workflows_noderun
                            WHERE workflow_run_id = r.id AND state IN ('pending', 'running'));
      CONTINUE WHEN NOT EXISTS (SELECT 1 FROM workflows_workflowrun
                                WHERE id = r.id AND state = 'running');
      IF EXISTS (SELECT 1 FROM workflows_noderun
                 WHERE workflow_run_id = r.id AND state NOT IN ('succeeded', 'skipped')) THEN
        RAISE EXCEPTION 'workflow run % ends failed', r.id USING ERRCODE = 'WFA01';
      END IF;
      -- A child workflow run's end ends its parent's node (workflows/execution/subflows.py).
      IF EXISTS (SELECT 1 FROM workflows_noderun WHERE child_run_id = r.id) THEN
        RAISE EXCEPTION 'workflow run % is a child', r.id USING ERRCODE = 'WFA01';
      END IF;
      UPDATE workflows_workflowrun SET state = 'succeeded', finished_at = v_now, error = ''
      WHERE id = r.id AND state = 'running';
    END LOOP;
  EXCEPTION WHEN OTHERS THEN
    IF SQLSTATE = 'WFA01' THEN
      RAISE;
    END IF;
    v_error := SQLSTATE || ': ' || SQLERRM;
    f_id := '{}'; l_id := '{}';
  END;

  IF v_error IS NOT NULL THEN
    RETURN QUERY SELECT 'error'::text, NULL::bigint, NULL::int, NULL::text, NULL::int,
        NULL::int, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::bigint,
        NULL::bigint, v_error, NULL::text, NULL::int, NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'leased'::text, x.id, x.attempt, x.queue, x.shard, NULL::int,
      NULL::timestamptz, x.owner_id, x.exp, x.job_id, x.sched, x.handler, x.payload, x.timeout,
      x.trace
    FROM unnest(l_id, l_attempt, l_queue, l_shard, l_exp, l_job, l_sched, l_handler,
                l_payload, l_timeout, l_owner, l_trace)
      AS x(id, attempt, queue, shard, exp, job_id, sched, handler, payload, timeout, owner_id,
           trace);
  RETURN QUERY SELECT 'pushed'::text, x.id, NULL::int, x.queue, x.shard, x.priority,
      x.run_at, x.owner_id, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text,
      NULL::text, NULL::int, NULL::text
    FROM unnest(f_id, f_queue, f_shard, f_prio, f_run_at, f_owner)
      AS x(id, queue, shard, priority, run_at, owner_id)
    WHERE NOT (x.id = ANY(l_id));
END $$;
