-- workflows_ack_succeeded with twelve arguments: the signature of the releases before
-- trace contexts (no p_traces, no o_trace), kept so that their workers, still running
-- during a rolling deploy, go on acking. It is the one ack of ack_succeeded.sql storing
-- no trace context, and it returns the columns they read. Applied whole by a migration
-- (workflows/sql/__init__.py), after ack_succeeded.sql, which it calls; on a database
-- migrated before, it replaces the twelve-argument function's own body.

CREATE OR REPLACE FUNCTION workflows_ack_succeeded(
    p_ids bigint[], p_attempts int[], p_results text[], p_worker text, p_queues text[],
    p_room int, p_ttl_s float8, p_limited text[], p_owner_limited boolean, p_shards int,
    p_urgent_queues text[], p_urgent_priorities int[])
RETURNS TABLE (o_kind text, o_id bigint, o_attempt int, o_queue text, o_shard int,
               o_priority int, o_run_at timestamptz, o_owner bigint, o_expires_us bigint,
               o_job bigint, o_scheduled_us bigint, o_handler text, o_payload text,
               o_timeout int)
LANGUAGE sql VOLATILE AS $$
  SELECT o_kind, o_id, o_attempt, o_queue, o_shard, o_priority, o_run_at, o_owner,
         o_expires_us, o_job, o_scheduled_us, o_handler, o_payload, o_timeout
  FROM workflows_ack_succeeded(p_ids, p_attempts, p_results, p_worker, p_queues, p_room,
                               p_ttl_s, p_limited, p_owner_limited, p_shards,
                               p_urgent_queues, p_urgent_priorities, NULL::text[])
$$;
