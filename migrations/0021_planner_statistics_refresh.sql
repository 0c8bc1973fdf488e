-- Planner statistics of the tables the worker's hot statements read, refreshed when a table has grown.
--
-- The worker runs its claim, completion and expansion statements as prepared statements. After five runs
-- PostgreSQL may keep one generic plan per session, made from the table's size at that moment, until something
-- invalidates it (an ANALYZE of a table it reads, DDL). The queue grows and shrinks by orders of magnitude
-- within seconds: a plan made while `deliveries` was empty sequential-scans it, and once the queue held
-- thousands of rows among a thousand pages of dead ones every claim read them all (20 ms instead of 2 in the
-- transactional bench, the completion likewise). Autovacuum's analyze comes at most once a minute per database
-- (autovacuum_naptime), later when its workers are busy with large tables.
--
-- Each worker asks about once a second which of the listed tables has grown (pushizo_grown_tables: its file holds
-- p_growth times the pages its statistics describe, plus p_min_pages, so that small tables are left to
-- autovacuum), and when one has, has it analyzed (pushizo_refresh_grown_statistics; docs/performance.md,
-- "Planner statistics"). The ANALYZE gives the planner the table as it is and invalidates every session's
-- cached plans that read it, which are then made again from those statistics. Growth by a factor means few
-- ANALYZEs: from empty to a million pages about ten per table.
CREATE FUNCTION pushizo_grown_tables(p_growth float8, p_min_pages integer) RETURNS text[]
    LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(c.relname::text ORDER BY c.relname), '{}')
    FROM pg_class c
    WHERE c.oid IN ('deliveries'::regclass, 'notifications'::regclass, 'subscriptions'::regclass, 'users'::regclass)
      AND pg_relation_size(c.oid) / current_setting('block_size')::bigint
          >= greatest(p_growth, 2) * greatest(c.relpages, 0) + greatest(p_min_pages, 16)
$$;

-- Analyzes each table pushizo_grown_tables names; returns each with whether it was analyzed. One worker of the
-- fleet at a time (an advisory lock nobody waits for: the others get no rows). A table another session holds
-- (autovacuum, a producer's maintenance) is skipped, not waited for and without a WARNING in the server log per
-- attempt (ANALYZE (SKIP_LOCKED) writes one): its lock is tried with NOWAIT first; the worker then checks less
-- often for a while.
--
-- Runs as its owner (SECURITY DEFINER): ANALYZE needs the table owner's rights, which the worker role may not
-- have (docs/systemd.md, "The schema-owning role"). It takes no name from the caller: the tables are fixed here.
CREATE FUNCTION pushizo_refresh_grown_statistics(p_growth float8, p_min_pages integer)
    RETURNS TABLE (relation text, analyzed boolean)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    grown text;
BEGIN
    -- "PUSHSTAT" in ASCII.
    IF NOT pg_try_advisory_xact_lock(x'5055534853544154'::bigint) THEN
        RETURN;
    END IF;
    FOREACH grown IN ARRAY pushizo_grown_tables(p_growth, p_min_pages) LOOP
        relation := grown;
        BEGIN
            -- The lock ANALYZE takes, held to the end of this call's transaction.
            EXECUTE format('LOCK TABLE %I IN SHARE UPDATE EXCLUSIVE MODE NOWAIT', grown);
        EXCEPTION WHEN lock_not_available THEN
            analyzed := false;
            RETURN NEXT;
            CONTINUE;
        END;
        -- notifications: not its documents (message, target), whose sampling made most of the table's
        -- ANALYZE (1.8 s under load against 0.1 s without); autovacuum analyzes them in its own time.
        EXECUTE format('ANALYZE %I%s', grown,
                       CASE WHEN grown = 'notifications'
                            THEN ' (id, app_id, status, created_at, send_after, scheduled, expansion_sliced)' ELSE '' END);
        analyzed := true;
        RETURN NEXT;
    END LOOP;
END;
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION pushizo_grown_tables(float8, integer) SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION pushizo_refresh_grown_statistics(float8, integer) SET search_path = %I, pg_temp',
                   current_schema());
END;
$$;

-- Not for every role that can connect: it takes locks and sets the fleet's turn. The worker role keeps EXECUTE
-- through the default privileges docs/systemd.md sets up; elsewhere: GRANT EXECUTE ON FUNCTION ... TO <role>.
REVOKE EXECUTE ON FUNCTION pushizo_refresh_grown_statistics(float8, integer) FROM PUBLIC;
