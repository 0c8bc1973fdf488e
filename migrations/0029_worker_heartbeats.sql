-- Worker heartbeats (docs/status.md, "Workers"; docs/operations.md, "Telling a dead worker from an idle one"): one
-- row per `pushizo-worker run` process, written by the process every PUSHIZO_HEARTBEAT_INTERVAL on a connection
-- of its own, so `status` shows which workers run, which stopped cleanly and which went silent.
--
-- Locks: a new table; nothing else is touched.
--
-- `worker_id`: a UUID the process makes at start (a restarted process is a new row). `leased_by`: what the process
-- writes into deliveries.leased_by (PUSHIZO_WORKER_ID), so its leases can be told apart. `last_seen_at` is the
-- database's now() of the last heartbeat, and `heartbeat_seconds` the process's interval: a row not seen for three
-- intervals is stale (its process is dead, hung or cut off from the database). `stopping_at` is set once the process
-- was asked to stop (it finishes its in-flight sends), `stopped_at` when it stopped cleanly; a process killed
-- (SIGKILL, a crash, the host gone) leaves neither and turns stale. The maintenance deletes rows not seen for a day.
-- Rates are over the last minute of the process's life: deliveries claimed (or leased at insert) and provider
-- exchanges ended.
CREATE TABLE worker_heartbeats (
    worker_id uuid PRIMARY KEY,
    leased_by text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    version text NOT NULL,
    commit text NOT NULL,
    roles text[] NOT NULL,
    heartbeat_seconds float8 NOT NULL CHECK (heartbeat_seconds > 0),
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    in_flight integer NOT NULL DEFAULT 0,
    claims_per_minute float8 NOT NULL DEFAULT 0,
    sends_per_minute float8 NOT NULL DEFAULT 0,
    stopping_at timestamptz,
    stopped_at timestamptz
);
CREATE INDEX worker_heartbeats_last_seen ON worker_heartbeats (last_seen_at);

-- pushizo_apply_roles() of 0028 keeps its grants under a name of its own; the function of that name now runs it and
-- grants this migration's table (pushizo_set_producer_row_security() calls it by name).
ALTER FUNCTION pushizo_apply_roles() RENAME TO pushizo_apply_roles_0028;

DO $do$
DECLARE
    q constant text := quote_ident(current_schema());
BEGIN
    EXECUTE replace($fn$
        CREATE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            PERFORM @s@.pushizo_apply_roles_0028();
            -- Each worker writes its own row and marks it stopped; the maintenance deletes rows long unseen.
            IF to_regrole('pushizo_worker') IS NOT NULL THEN
                GRANT SELECT, INSERT, UPDATE, DELETE ON @s@.worker_heartbeats TO pushizo_worker;
            END IF;
            IF to_regrole('pushizo_reader') IS NOT NULL THEN
                GRANT SELECT ON @s@.worker_heartbeats TO pushizo_reader;
            END IF;
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_apply_roles_0028() FROM PUBLIC;

SELECT pushizo_apply_roles();
