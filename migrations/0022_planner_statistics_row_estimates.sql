-- Planner statistics that claim an empty table while it holds thousands of rows are refreshed too.
--
-- Migration 0021 refreshes a table's statistics when its file has grown. That misses the queue's commonest
-- pattern: autovacuum runs while `deliveries` is nearly empty (between bursts) and records few live rows
-- (`reltuples`) over many pages (`relpages`), often without truncating the empty pages (it gives up the
-- truncation whenever another session wants the table). The planner estimates a table's rows as
-- reltuples / relpages times its current pages: zero rows over 800 pages means one row estimated however many
-- the next burst writes into those same pages, so the file does not grow and 0021 sees nothing. With that
-- estimate the completion joined its batch to `deliveries` as a nested loop over the whole table: 20,000
-- deliveries took 42 s instead of 0.9 s on the bench machine, until autovacuum's next analyze.
--
-- A table is now also refreshed when it holds p_growth times the rows its statistics estimate for its current
-- size, plus p_min_rows, while that estimate is small (the rule is for estimates near zero; at 25,000 rows and more
-- the plans use their indexes anyway). Two counts decide it, the cheap one first:
--  - the cumulative statistics' live-row count (pg_stat_get_live_tuples: committed inserts and deletes, sent by
--    each session at most about once a second) must reach that many rows. On a small queue that churns fast it
--    drifts upward: producers and consumers report at different moments, and a total that would go below zero
--    is set back to zero, losing deletions (seen at 2,500-7,000 with 0-700 rows queued, at 4,000 rows a second).
--  - so a table passing that is then counted, at most that many rows, through its primary key
--    (pushizo_holds_rows): a few milliseconds, read from the index since the last vacuum removed the dead rows'
--    entries, never a pass over the table's pages.
-- A table whose statistics describe no pages (never vacuumed or analyzed, or vacuumed down to nothing) is left
-- to the page rule: the planner then estimates rows from the row width, not from a density of zero.
--
-- p_min_rows has a default so that a worker started before this migration, calling with two arguments, keeps
-- working. The two-argument functions are replaced: a role granted EXECUTE on them explicitly (other than through
-- the default privileges of docs/systemd.md) must be granted the three-argument one.
DROP FUNCTION pushizo_refresh_grown_statistics(float8, integer);
DROP FUNCTION pushizo_grown_tables(float8, integer);

-- Whether the table holds at least p_rows rows, counted through its primary key in order, so that no plan can
-- read every page of a table mostly dead (enable_seqscan off: the table's statistics are the ones in doubt).
CREATE FUNCTION pushizo_holds_rows(p_table text, p_rows bigint) RETURNS boolean
    LANGUAGE sql STABLE SET enable_seqscan = off SET enable_sort = off AS $$
    SELECT CASE p_table
        WHEN 'deliveries' THEN (SELECT count(*) FROM (SELECT FROM deliveries ORDER BY id LIMIT p_rows) r)
        WHEN 'notifications' THEN (SELECT count(*) FROM (SELECT FROM notifications ORDER BY id LIMIT p_rows) r)
        WHEN 'subscriptions' THEN (SELECT count(*) FROM (SELECT FROM subscriptions ORDER BY id LIMIT p_rows) r)
        WHEN 'users' THEN (SELECT count(*) FROM (SELECT FROM users ORDER BY id LIMIT p_rows) r)
    END >= p_rows
$$;

CREATE FUNCTION pushizo_grown_tables(p_growth float8, p_min_pages integer, p_min_rows bigint DEFAULT 1000)
    RETURNS text[]
    LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(t.relname::text ORDER BY t.relname), '{}')
    FROM (
        SELECT c.relname, c.relpages, p.pages, pg_stat_get_live_tuples(c.oid) AS live_rows,
               CASE WHEN c.relpages > 0 AND c.reltuples >= 0
                    THEN ceil(greatest(p_growth, 2) * c.reltuples / c.relpages * p.pages) + greatest(p_min_rows, 100)
               END AS rows_wanted
        FROM pg_class c
        CROSS JOIN LATERAL (SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint AS pages) p
        WHERE c.oid IN ('deliveries'::regclass, 'notifications'::regclass, 'subscriptions'::regclass, 'users'::regclass)
    ) t
    WHERE t.pages >= greatest(p_growth, 2) * greatest(t.relpages, 0) + greatest(p_min_pages, 16)
       -- CASE: the count runs only for a table whose live-row count passed.
       OR CASE WHEN t.rows_wanted <= 100000 AND t.live_rows >= t.rows_wanted
               THEN pushizo_holds_rows(t.relname::text, t.rows_wanted::bigint)
               ELSE false END
$$;

-- As in 0021 (the advisory lock nobody waits for, the NOWAIT lock, notifications without their documents); only
-- the rule that picks the tables changed.
CREATE FUNCTION pushizo_refresh_grown_statistics(p_growth float8, p_min_pages integer, p_min_rows bigint DEFAULT 1000)
    RETURNS TABLE (relation text, analyzed boolean)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    grown text;
BEGIN
    -- "PUSHSTAT" in ASCII.
    IF NOT pg_try_advisory_xact_lock(x'5055534853544154'::bigint) THEN
        RETURN;
    END IF;
    FOREACH grown IN ARRAY pushizo_grown_tables(p_growth, p_min_pages, p_min_rows) LOOP
        relation := grown;
        BEGIN
            -- The lock ANALYZE takes, held to the end of this call's transaction.
            EXECUTE format('LOCK TABLE %I IN SHARE UPDATE EXCLUSIVE MODE NOWAIT', grown);
        EXCEPTION WHEN lock_not_available THEN
            analyzed := false;
            RETURN NEXT;
            CONTINUE;
        END;
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
    EXECUTE format('ALTER FUNCTION pushizo_holds_rows(text, bigint) SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION pushizo_grown_tables(float8, integer, bigint) SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION pushizo_refresh_grown_statistics(float8, integer, bigint) SET search_path = %I, pg_temp',
                   current_schema());
END;
$$;

REVOKE EXECUTE ON FUNCTION pushizo_refresh_grown_statistics(float8, integer, bigint) FROM PUBLIC;
