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
-- The worker calls this function about once a second (docs/performance.md, "Planner statistics"). It analyzes
-- each of the listed tables whose file has grown to p_growth times the pages its statistics describe (plus
-- p_min_pages, so that small tables are left to autovacuum): the ANALYZE gives the planner the table as it is
-- and invalidates every session's cached plans that read it, which are then made again from those statistics.
-- A table locked by autovacuum or another session's ANALYZE is skipped (SKIP_LOCKED), not waited for, and one
-- worker of the fleet refreshes at a time. Growth by a factor means few ANALYZEs: from empty to a million pages
-- about ten. Returns the tables it analyzed (not those it skipped).
--
-- Runs as its owner (SECURITY DEFINER): ANALYZE needs the table owner's rights, which the worker role may not
-- have (docs/systemd.md, "The schema-owning role"). It takes no name from the caller: the tables are fixed here.
CREATE FUNCTION pushizo_refresh_grown_statistics(p_growth float8, p_min_pages integer) RETURNS text[]
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    grown regclass;
    pages_before integer;
    analyzed text[] := '{}';
BEGIN
    -- One worker of the fleet at a time ("PUSHSTAT" in ASCII); the others find nothing to do this second.
    IF NOT pg_try_advisory_xact_lock(x'5055534853544154'::bigint) THEN
        RETURN analyzed;
    END IF;
    FOR grown, pages_before IN
        SELECT c.oid::regclass, c.relpages
        FROM pg_class c
        WHERE c.oid IN ('deliveries'::regclass, 'notifications'::regclass, 'subscriptions'::regclass,
                        'users'::regclass)
          AND pg_relation_size(c.oid) / current_setting('block_size')::bigint
              >= greatest(p_growth, 2) * greatest(c.relpages, 0) + greatest(p_min_pages, 16)
    LOOP
        -- notifications: not its documents (message, target), whose sampling made most of the table's
        -- ANALYZE (1.8 s under load against 0.1 s without); autovacuum analyzes them in its own time.
        EXECUTE format('ANALYZE (SKIP_LOCKED) %s%s', grown,
                       CASE WHEN grown = 'notifications'::regclass
                            THEN ' (id, app_id, status, created_at, send_after, scheduled, expansion_sliced)' ELSE '' END);
        -- ANALYZE writes relpages in place (visible at once); unchanged, it skipped the table (SKIP_LOCKED).
        IF (SELECT relpages FROM pg_class WHERE oid = grown) IS DISTINCT FROM pages_before THEN
            analyzed := analyzed || grown::text;
        END IF;
    END LOOP;
    RETURN analyzed;
END;
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION pushizo_refresh_grown_statistics(float8, integer) SET search_path = %I, pg_temp',
                   current_schema());
END;
$$;
