-- Every function that runs with its owner's rights resolves names through pg_catalog only.
--
-- The owner-rights functions of 0010 (event partitions), 0012 (an app's send limit changed), 0015 (notifications
-- deleted or renumbered) and 0021/0022 (planner statistics), and the plain functions they call, had
-- search_path = <schema>, pg_temp. pg_catalog is searched first implicitly, but that does not keep PostgreSQL's
-- operators in charge: an operator is chosen by argument types before search-path order, so one made in the schema
-- with the exact types of an expression these functions hold would be called instead of the built-in that needs an
-- implicit cast, with the owner's rights. They compare `pg_class.oid` with a `regclass` (`oid = regclass`; the
-- built-in is `oid = oid`) and multiply a float8 by an integer (built-in: float8 * float8). A role with CREATE on
-- the schema could so run its own code as the schema's owner (PostgreSQL docs, "Writing SECURITY DEFINER
-- Functions Safely"; CREATE OPERATOR, "operator type resolution").
--
-- They are replaced, as 0023's were made: search_path = pg_catalog, pg_temp, and the schema written into each
-- name they use. CREATE OR REPLACE keeps each function's owner, grants and triggers; the bodies do what they did.
-- A trigger that fires on a statement these bodies run inherits the pinned path. None does today (`deliveries`
-- has no DELETE trigger and none on UPDATE OF throttled; `app_send_buckets` has none; statement triggers of
-- `delivery_events` do not fire for a statement on one partition): a trigger added there later must name its
-- tables with the schema or set its own search_path.
--
-- The three partition functions also fix DateStyle and TimeZone: partition bounds go through text (pg_get_expr
-- reading them, format('%L') writing them), in the session's settings. A caller with DateStyle 'Postgres' and a
-- POSIX zone named like an abbreviation ('LINT+160') read today's bounds back days off, and the drop took today's
-- and tomorrow's partitions for expired ones; with 'Asia/Kolkata' a day's partition began at 03:30 UTC and the
-- next day's could not be created. The worker sets ISO and UTC on its own sessions; any other caller may not.
--
-- The schema's name is written into the bodies as an identifier, inside string literals (regclass constants) and
-- inside format() templates. A name holding a single quote or a percent sign would need other spellings in the
-- last two; this migration refuses it instead.
DO $do$
DECLARE
    schema_name constant text := current_schema();
    q constant text := quote_ident(current_schema());
BEGIN
    IF schema_name ~ '[''%]' THEN
        RAISE EXCEPTION 'schema name % holds a single quote or a percent sign; run the migrations in a schema without either', q;
    END IF;

    -- 0006/0010: the partitions of delivery_events as the catalog lists them.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_event_partitions(OUT name text, OUT lower_bound timestamptz,
                                                               OUT upper_bound timestamptz, OUT is_default boolean)
            RETURNS SETOF record LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
            SET DateStyle = 'ISO, YMD' SET TimeZone = 'UTC' AS $body$
            SELECT c.relname::text,
                   CASE WHEN b.m[1] <> 'MINVALUE' THEN btrim(b.m[1], '''')::timestamptz END,
                   CASE WHEN b.m[2] <> 'MAXVALUE' THEN btrim(b.m[2], '''')::timestamptz END,
                   b.m IS NULL
            FROM pg_inherits i
            JOIN pg_class c ON c.oid = i.inhrelid
            CROSS JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                                    '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m) AS b
            WHERE i.inhparent = '@s@.delivery_events'::regclass
            ORDER BY b.m IS NULL, 3
        $body$
    $fn$, '@s@', q);

    -- 0010: creates one UTC day's partition beside its parent; moves that day's rows out of the DEFAULT
    -- partition first when it holds any.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_create_event_partition(p_day date) RETURNS text
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            SET DateStyle = 'ISO, YMD' SET TimeZone = 'UTC' AS $body$
        DECLARE
            v_name text := 'delivery_events_p' || to_char(p_day, 'YYYYMMDD');
            v_from timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
            v_to   timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
        BEGIN
            IF EXISTS (SELECT 1 FROM @s@.pushizo_event_partitions() p
                       WHERE NOT p.is_default AND (p.lower_bound IS NULL OR p.lower_bound < v_to)
                         AND p.upper_bound > v_from) THEN
                RETURN NULL;
            END IF;
            IF EXISTS (SELECT 1 FROM @s@.delivery_events_default WHERE at >= v_from AND at < v_to) THEN
                EXECUTE format('CREATE TABLE @s@.%I (LIKE @s@.delivery_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                               v_name);
                EXECUTE format(
                    'WITH moved AS (DELETE FROM @s@.delivery_events_default WHERE at >= $1 AND at < $2 RETURNING *) '
                    'INSERT INTO @s@.%I SELECT * FROM moved', v_name) USING v_from, v_to;
                EXECUTE format('ALTER TABLE @s@.delivery_events ATTACH PARTITION @s@.%I FOR VALUES FROM (%L) TO (%L)',
                               v_name, v_from, v_to);
            ELSE
                EXECUTE format('CREATE TABLE @s@.%I PARTITION OF @s@.delivery_events FOR VALUES FROM (%L) TO (%L)',
                               v_name, v_from, v_to);
            END IF;
            RETURN v_name;
        END;
        $body$
    $fn$, '@s@', q);

    -- 0010: drops the named day partition of delivery_events when its whole range is older than the retention
    -- (at least one day). It drops the partition the catalog lists in this schema, by its oid.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_drop_event_partition(p_name text, p_retention_seconds float8)
            RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
            SET DateStyle = 'ISO, YMD' SET TimeZone = 'UTC' AS $body$
        DECLARE
            v_partition regclass;
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM @s@.pushizo_event_partitions() p
                           WHERE p.name = p_name AND NOT p.is_default AND p.upper_bound IS NOT NULL
                             AND p.upper_bound <= now() - make_interval(secs => greatest(p_retention_seconds, 86400))) THEN
                RETURN false;
            END IF;
            SELECT c.oid INTO v_partition
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = '@s@.delivery_events'::regclass AND c.relname = p_name
              AND c.relnamespace = '@s@'::regnamespace;
            IF v_partition IS NULL THEN
                RETURN false;
            END IF;
            -- regclass prints schema-qualified and quoted here: the path holds only pg_catalog.
            EXECUTE format('DROP TABLE %s', v_partition);
            RETURN true;
        END;
        $body$
    $fn$, '@s@', q);

    -- 0012: an app's send limit set or cleared.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_app_throttle_changed() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            IF NEW.max_sends_per_second IS NOT NULL THEN
                INSERT INTO @s@.app_send_buckets (app_id, tokens)
                VALUES (NEW.id, @s@.pushizo_send_burst(NEW.max_sends_per_second))
                ON CONFLICT (app_id) DO NOTHING;
            ELSE
                DELETE FROM @s@.app_send_buckets WHERE app_id = NEW.id;
            END IF;
            IF TG_OP = 'UPDATE' AND (OLD.max_sends_per_second IS NULL) <> (NEW.max_sends_per_second IS NULL) THEN
                UPDATE @s@.deliveries SET throttled = (NEW.max_sends_per_second IS NOT NULL)
                WHERE app_id = NEW.id AND throttled = (NEW.max_sends_per_second IS NULL);
            END IF;
            RETURN NULL;
        END;
        $body$
    $fn$, '@s@', q);

    -- 0015/0020: deleting notifications deletes their deliveries (custom plans: the transition table's size
    -- varies by orders of magnitude).
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_notifications_deleted() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_custom_plan AS $body$
        BEGIN
            DELETE FROM @s@.deliveries d USING gone WHERE d.notification_id = gone.id;
            RETURN NULL;
        END;
        $body$
    $fn$, '@s@', q);

    -- 0015: a notification with deliveries keeps its id.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_notification_id_changed() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            IF EXISTS (SELECT 1 FROM @s@.deliveries WHERE notification_id = OLD.id) THEN
                RAISE EXCEPTION 'update on table "notifications" would leave deliveries without their notification'
                    USING ERRCODE = 'foreign_key_violation', TABLE = 'notifications', COLUMN = 'id';
            END IF;
            RETURN NULL;
        END;
        $body$
    $fn$, '@s@', q);

    -- 0022: whether the table holds at least p_rows rows, counted through its primary key.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_holds_rows(p_table text, p_rows bigint) RETURNS boolean
            LANGUAGE sql STABLE SET enable_seqscan = off SET enable_sort = off
            SET search_path = pg_catalog, pg_temp AS $body$
            SELECT CASE p_table
                WHEN 'deliveries' THEN (SELECT count(*) FROM (SELECT FROM @s@.deliveries ORDER BY id LIMIT p_rows) r)
                WHEN 'notifications' THEN (SELECT count(*) FROM (SELECT FROM @s@.notifications ORDER BY id LIMIT p_rows) r)
                WHEN 'subscriptions' THEN (SELECT count(*) FROM (SELECT FROM @s@.subscriptions ORDER BY id LIMIT p_rows) r)
                WHEN 'users' THEN (SELECT count(*) FROM (SELECT FROM @s@.users ORDER BY id LIMIT p_rows) r)
            END >= p_rows
        $body$
    $fn$, '@s@', q);

    -- 0022: the listed tables whose statistics no longer describe them.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_grown_tables(p_growth float8, p_min_pages integer,
                                                           p_min_rows bigint DEFAULT 1000)
            RETURNS text[] LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $body$
            SELECT coalesce(array_agg(t.relname::text ORDER BY t.relname), '{}')
            FROM (
                SELECT c.relname, c.relpages, p.pages, pg_stat_get_live_tuples(c.oid) AS live_rows,
                       CASE WHEN c.relpages > 0 AND c.reltuples >= 0
                            THEN ceil(greatest(p_growth, 2) * c.reltuples / c.relpages * p.pages) + greatest(p_min_rows, 100)
                       END AS rows_wanted
                FROM pg_class c
                CROSS JOIN LATERAL (SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint AS pages) p
                WHERE c.oid IN ('@s@.deliveries'::regclass, '@s@.notifications'::regclass,
                                '@s@.subscriptions'::regclass, '@s@.users'::regclass)
            ) t
            WHERE t.pages >= greatest(p_growth, 2) * greatest(t.relpages, 0) + greatest(p_min_pages, 16)
               OR CASE WHEN t.rows_wanted <= 100000 AND t.live_rows >= t.rows_wanted
                       THEN @s@.pushizo_holds_rows(t.relname::text, t.rows_wanted::bigint)
                       ELSE false END
        $body$
    $fn$, '@s@', q);

    -- 0021/0022: analyzes each grown table, one worker of the fleet at a time, skipping a table another session
    -- holds.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_refresh_grown_statistics(p_growth float8, p_min_pages integer,
                                                                       p_min_rows bigint DEFAULT 1000)
            RETURNS TABLE (relation text, analyzed boolean)
            LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
        DECLARE
            grown text;
        BEGIN
            -- "PUSHSTAT" in ASCII.
            IF NOT pg_try_advisory_xact_lock(x'5055534853544154'::bigint) THEN
                RETURN;
            END IF;
            FOREACH grown IN ARRAY @s@.pushizo_grown_tables(p_growth, p_min_pages, p_min_rows) LOOP
                relation := grown;
                BEGIN
                    EXECUTE format('LOCK TABLE @s@.%I IN SHARE UPDATE EXCLUSIVE MODE NOWAIT', grown);
                EXCEPTION WHEN lock_not_available THEN
                    analyzed := false;
                    RETURN NEXT;
                    CONTINUE;
                END;
                EXECUTE format('ANALYZE @s@.%I%s', grown,
                               CASE WHEN grown = 'notifications'
                                    THEN ' (id, app_id, status, created_at, send_after, scheduled, expansion_sliced)'
                                    ELSE '' END);
                analyzed := true;
                RETURN NEXT;
            END LOOP;
        END;
        $body$
    $fn$, '@s@', q);
END;
$do$;
