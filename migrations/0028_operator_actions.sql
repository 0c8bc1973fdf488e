-- Operator commands (docs/operations.md, "Operator commands"): pauses of an app and of the whole fleet that the
-- claim honours, and an audit record of what `pushizo-worker pause`, `resume`, `cancel` and `retry` did.
--
-- Locks: ADD COLUMN without a default on `apps` takes its ACCESS EXCLUSIVE lock for an instant (no rewrite); the
-- new tables and the partial index on `apps` (empty: no app is paused yet) are created at once.
--
-- `apps.paused_until` / `paused_reason`: an app paused by an operator (reason `operator`; `infinity` = until
-- resumed). The claim leaves a paused app's turn alone and takes none of its deliveries, and an expansion chunk
-- leases none of them at insert; they wait in the queue, due, without claims or events.
-- `fleet_settings`: one row; while its `paused_until` lies ahead no claim takes anything and no chunk leases at
-- insert (a drain before maintenance). Sends already claimed finish and write their events.
-- Both are read per claim from a partial index and a one-row table (one InitPlan each), so an unpaused fleet pays
-- two index probes per claim statement, not per row.
--
-- A channel paused by an operator is `app_channels.paused_reason = 'operator'` with `paused_until` its end
-- (`infinity` = until resumed): the delivery decision already makes such a channel's deliveries wait until
-- `paused_until`, and the worker's own pauses (a provider refusing the credentials) keep the operator's reason
-- while the operator's pause lasts longer (CompletionStore).
ALTER TABLE apps ADD COLUMN paused_until timestamptz, ADD COLUMN paused_reason text;
CREATE INDEX apps_paused ON apps (id) WHERE paused_until IS NOT NULL;

CREATE TABLE fleet_settings (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    paused_until timestamptz,
    paused_reason text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO fleet_settings DEFAULT VALUES;

-- One row per operator command that ran: who (the session's login role and the operator's `--reason`), what,
-- on which target, when, and how many rows it changed; `detail` holds the command's own counts (per reason,
-- already so, ...). Append-only by convention; the owner writes it, the reader reads it.
CREATE TABLE operator_actions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    role_name name NOT NULL DEFAULT session_user,
    action text NOT NULL,
    scope text NOT NULL CHECK (scope IN ('channel', 'app', 'fleet', 'notification')),
    app_id uuid,
    provider text,
    notification_id uuid,
    reason text,
    rows_affected bigint NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX operator_actions_at ON operator_actions (at);

-- pushizo_apply_roles() of 0027 keeps its grants under a name of its own; the function of that name now runs it
-- and grants this migration's objects (pushizo_set_producer_row_security() calls it by name).
ALTER FUNCTION pushizo_apply_roles() RENAME TO pushizo_apply_roles_0027;

DO $do$
DECLARE
    q constant text := quote_ident(current_schema());
BEGIN
    EXECUTE replace($fn$
        CREATE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            PERFORM @s@.pushizo_apply_roles_0027();
            -- The worker reads the pauses in its claim (apps: SELECT on the whole table already).
            IF to_regrole('pushizo_worker') IS NOT NULL THEN
                GRANT SELECT ON @s@.fleet_settings TO pushizo_worker;
            END IF;
            IF to_regrole('pushizo_reader') IS NOT NULL THEN
                GRANT SELECT (paused_until, paused_reason) ON @s@.apps TO pushizo_reader;
                GRANT SELECT ON @s@.fleet_settings, @s@.operator_actions TO pushizo_reader;
            END IF;
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_apply_roles_0027() FROM PUBLIC;

SELECT pushizo_apply_roles();
