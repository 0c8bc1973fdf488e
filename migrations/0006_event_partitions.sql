-- The data lifecycle (docs/data-lifecycle.md): delivery_events partitioned by day on `at`, counts kept as
-- per-statement deltas instead of grouping the events on every read, and the functions the worker's
-- maintenance (`pushizo-worker maintain`, and `run` on a schedule) drives. The producer contract is unchanged:
-- `delivery_events` keeps its name and every column; `notification_counts` keeps its columns and meaning.
--
-- Converting an existing table in place, without copying it (the whole file is one transaction):
--   1. the table and its indexes are renamed to delivery_events_legacy*; its identity is dropped (the
--      sequence's position is carried over to the new parent's identity);
--   2. the partitioned parent `delivery_events` is created with the same columns;
--   3. a table with rows is attached as the partition [MINVALUE, the UTC day after its newest event or
--      today); attaching scans it once to check the bound; the (id, at) unique index the parent's primary key
--      needs is built first (or adopted, when an operator built it CONCURRENTLY beforehand under the name
--      delivery_events_id_at); its other indexes are adopted as they are. An empty table is dropped;
--   4. the count deltas are seeded from the existing events (one scan, grouped by notification);
--   5. daily partitions from there to 7 days ahead, and a DEFAULT partition as a safety net.
-- Every statement runs under the ACCESS EXCLUSIVE lock the rename takes, so producers' and workers' writes to
-- delivery_events wait until the migration commits (measured cost in docs/data-lifecycle.md).

-- 1. The existing table, renamed; its identity's position kept for the new parent.
CREATE TEMPORARY TABLE pushizo_conversion ON COMMIT DROP AS
SELECT last_value, is_called FROM delivery_events_id_seq;
ALTER TABLE delivery_events RENAME TO delivery_events_legacy;
ALTER INDEX delivery_events_pkey RENAME TO delivery_events_legacy_pkey;
ALTER INDEX delivery_events_notification RENAME TO delivery_events_legacy_notification;
ALTER INDEX delivery_events_subscription_at RENAME TO delivery_events_legacy_subscription_at;
-- Built beforehand by an operator (CREATE UNIQUE INDEX CONCURRENTLY delivery_events_id_at ON delivery_events
-- (id, at)), the key's index is adopted below instead of built under the lock.
ALTER INDEX IF EXISTS delivery_events_id_at RENAME TO delivery_events_legacy_id_at;
ALTER TABLE delivery_events_legacy ALTER COLUMN id DROP IDENTITY;

-- 2. The partitioned parent: the same columns (the producer contract), the primary key widened by the
-- partition key as PostgreSQL requires, the same indexes (each partition gets its own).
CREATE TABLE delivery_events (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    at              timestamptz NOT NULL DEFAULT now(),
    app_id          uuid NOT NULL,
    notification_id uuid NOT NULL,
    subscription_id uuid,
    event           text NOT NULL,
    reason          text,
    attempt         integer NOT NULL DEFAULT 0,
    detail          jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);
CREATE INDEX delivery_events_notification ON delivery_events (notification_id, subscription_id);
CREATE INDEX delivery_events_subscription_at ON delivery_events (subscription_id, at);
SELECT setval(pg_get_serial_sequence('delivery_events', 'id'), last_value, is_called) FROM pushizo_conversion;

-- The partitions of delivery_events with their bounds as instants (NULL lower bound = MINVALUE), read from
-- the catalog (pg_inherits, pg_class.relpartbound), oldest first, the DEFAULT partition last.
CREATE FUNCTION pushizo_event_partitions(
    OUT name text, OUT lower_bound timestamptz, OUT upper_bound timestamptz, OUT is_default boolean)
    RETURNS SETOF record LANGUAGE sql STABLE AS $$
    SELECT c.relname::text,
           CASE WHEN b.m[1] <> 'MINVALUE' THEN btrim(b.m[1], '''')::timestamptz END,
           CASE WHEN b.m[2] <> 'MAXVALUE' THEN btrim(b.m[2], '''')::timestamptz END,
           b.m IS NULL
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                            '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m) AS b
    WHERE i.inhparent = to_regclass('delivery_events')
    ORDER BY b.m IS NULL, 3
$$;

-- A day's partition of delivery_events: [day 00:00 UTC, next day 00:00 UTC), named delivery_events_pYYYYMMDD.
-- Rows of that day waiting in the DEFAULT partition (written while no partition covered the day) are moved
-- into it first, in the same transaction, so creating it never fails on them and no event is lost; the move
-- touches the partitions directly, so it fires no trigger of the parent and leaves the counts as they are.
-- Returns the partition's name, or NULL when a partition already covers that day's start.
CREATE FUNCTION pushizo_create_event_partition(p_day date) RETURNS text
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_name text := 'delivery_events_p' || to_char(p_day, 'YYYYMMDD');
    v_from timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    v_to   timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF EXISTS (SELECT 1 FROM pushizo_event_partitions() p
               WHERE NOT p.is_default AND (p.lower_bound IS NULL OR p.lower_bound < v_to)
                 AND p.upper_bound > v_from) THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM delivery_events_default WHERE at >= v_from AND at < v_to) THEN
        EXECUTE format('CREATE TABLE %I (LIKE delivery_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', v_name);
        EXECUTE format(
            'WITH moved AS (DELETE FROM delivery_events_default WHERE at >= $1 AND at < $2 RETURNING *) '
            'INSERT INTO %I SELECT * FROM moved', v_name) USING v_from, v_to;
        EXECUTE format('ALTER TABLE delivery_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_from, v_to);
    ELSE
        EXECUTE format('CREATE TABLE %I PARTITION OF delivery_events FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_from, v_to);
    END IF;
    RETURN v_name;
END;
$$;

-- Counts per notification as deltas: one row per (statement, notification) that wrote counted events, summed
-- when read, folded into one row per notification by the maintenance. Appending rather than updating one row
-- per notification means completion transactions of one broadcast never wait on each other's row lock (and
-- cannot deadlock on several). No foreign key: an event may outlive its notification (deleted while a push was
-- in flight), and a missing parent must never fail a completion.
CREATE TABLE notification_event_counts (
    notification_id uuid NOT NULL,
    sent            bigint NOT NULL DEFAULT 0,
    failed          bigint NOT NULL DEFAULT 0,
    skipped         bigint NOT NULL DEFAULT 0,
    deferred        bigint NOT NULL DEFAULT 0
);
CREATE INDEX notification_event_counts_notification ON notification_event_counts (notification_id);

-- Same columns, same meaning: the number of each counted event written for the notification. One index
-- lookup of a few delta rows per notification, whatever its size.
CREATE OR REPLACE VIEW notification_counts AS
SELECT n.id AS notification_id, n.targeted_count AS targeted,
       coalesce(c.sent, 0) AS sent, coalesce(c.failed, 0) AS failed,
       coalesce(c.skipped, 0) AS skipped, coalesce(c.deferred, 0) AS deferred
FROM notifications n
LEFT JOIN LATERAL (
    SELECT sum(sent)::bigint AS sent, sum(failed)::bigint AS failed,
           sum(skipped)::bigint AS skipped, sum(deferred)::bigint AS deferred
    FROM notification_event_counts c WHERE c.notification_id = n.id
) AS c ON true;

-- 3 and 4. The old rows: counted, then attached as one partition covering everything up to its newest day.
DO $$
DECLARE
    v_upper timestamptz;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM delivery_events_legacy) THEN
        DROP TABLE delivery_events_legacy;
        RETURN;
    END IF;
    INSERT INTO notification_event_counts (notification_id, sent, failed, skipped, deferred)
    SELECT notification_id,
           count(*) FILTER (WHERE event = 'sent'), count(*) FILTER (WHERE event = 'failed'),
           count(*) FILTER (WHERE event = 'skipped'), count(*) FILTER (WHERE event = 'deferred')
    FROM delivery_events_legacy
    WHERE event IN ('sent', 'failed', 'skipped', 'deferred')
    GROUP BY notification_id;
    SELECT ((greatest(max(at), now()) AT TIME ZONE 'UTC')::date + 1)::timestamp AT TIME ZONE 'UTC'
    INTO v_upper FROM delivery_events_legacy;
    -- The parent's primary key needs a unique index on (id, at): built here unless a valid one was built
    -- beforehand; the attach adopts it.
    IF NOT EXISTS (SELECT 1 FROM pg_index
                   WHERE indexrelid = to_regclass('delivery_events_legacy_id_at')
                     AND indrelid = 'delivery_events_legacy'::regclass
                     AND indisunique AND indisvalid AND indpred IS NULL AND indexprs IS NULL
                     AND indkey::text = '1 2') THEN
        DROP INDEX IF EXISTS delivery_events_legacy_id_at;
        CREATE UNIQUE INDEX delivery_events_legacy_id_at ON delivery_events_legacy (id, at);
    END IF;
    ALTER TABLE delivery_events_legacy DROP CONSTRAINT delivery_events_legacy_pkey;
    EXECUTE format('ALTER TABLE delivery_events ATTACH PARTITION delivery_events_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
                   v_upper);
END;
$$;

-- 5. The safety net, then daily partitions from today (or the legacy partition's end) to 7 days ahead.
CREATE TABLE delivery_events_default PARTITION OF delivery_events DEFAULT;
SELECT pushizo_create_event_partition(d::date)
FROM generate_series((now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date + 7, interval '1 day') AS d;

-- Every statement that writes counted events appends its deltas, in the same transaction: the counts are
-- exactly the events written. Statement-level with transition tables, so a completion batch of 200 events adds
-- one row per notification in it, not 200. Dropping or detaching partitions fires nothing: counts outlive the
-- events' retention (docs/data-lifecycle.md). Rows written straight into a partition (not through
-- delivery_events) are not counted.
CREATE FUNCTION pushizo_count_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO notification_event_counts (notification_id, sent, failed, skipped, deferred)
        SELECT notification_id,
               count(*) FILTER (WHERE event = 'sent'), count(*) FILTER (WHERE event = 'failed'),
               count(*) FILTER (WHERE event = 'skipped'), count(*) FILTER (WHERE event = 'deferred')
        FROM pushizo_new_events
        WHERE event IN ('sent', 'failed', 'skipped', 'deferred')
        GROUP BY notification_id;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO notification_event_counts (notification_id, sent, failed, skipped, deferred)
        SELECT notification_id,
               -count(*) FILTER (WHERE event = 'sent'), -count(*) FILTER (WHERE event = 'failed'),
               -count(*) FILTER (WHERE event = 'skipped'), -count(*) FILTER (WHERE event = 'deferred')
        FROM pushizo_old_events
        WHERE event IN ('sent', 'failed', 'skipped', 'deferred')
        GROUP BY notification_id;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER delivery_events_count_insert AFTER INSERT ON delivery_events
    REFERENCING NEW TABLE AS pushizo_new_events FOR EACH STATEMENT EXECUTE FUNCTION pushizo_count_events();
CREATE TRIGGER delivery_events_count_update AFTER UPDATE ON delivery_events
    REFERENCING OLD TABLE AS pushizo_old_events NEW TABLE AS pushizo_new_events
    FOR EACH STATEMENT EXECUTE FUNCTION pushizo_count_events();
CREATE TRIGGER delivery_events_count_delete AFTER DELETE ON delivery_events
    REFERENCING OLD TABLE AS pushizo_old_events FOR EACH STATEMENT EXECUTE FUNCTION pushizo_count_events();

-- Folds the deltas of up to p_limit notifications into one row each, and drops those of notifications that no
-- longer exist (the view never shows them). Safe beside concurrent writers: a delta committed after this
-- statement's snapshot is neither deleted nor summed, so it stays as it is. Returns the notifications folded.
CREATE FUNCTION pushizo_compact_notification_counts(p_limit integer) RETURNS integer
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_folded integer;
BEGIN
    DELETE FROM notification_event_counts c
    WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = c.notification_id);
    WITH many AS (
        SELECT notification_id FROM notification_event_counts
        GROUP BY notification_id HAVING count(*) > 1 LIMIT p_limit
    ), gone AS (
        DELETE FROM notification_event_counts c USING many m WHERE c.notification_id = m.notification_id
        RETURNING c.*
    ), folded AS (
        INSERT INTO notification_event_counts (notification_id, sent, failed, skipped, deferred)
        SELECT notification_id, sum(sent), sum(failed), sum(skipped), sum(deferred) FROM gone GROUP BY notification_id
        RETURNING 1
    )
    SELECT count(*) INTO v_folded FROM folded;
    RETURN v_folded;
END;
$$;

-- Grant pruning by the maintenance reads grants by age across every key.
CREATE INDEX frequency_cap_grants_granted_at ON frequency_cap_grants (granted_at);
