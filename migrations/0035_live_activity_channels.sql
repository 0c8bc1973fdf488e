-- Live Activity broadcast channels (docs/live-activity-channels.md): producers write `live_activity_channels`, one
-- row per app and channel under a name of their own, with the message storage policy and the desired state
-- (`present` / `absent`); the worker creates the channel at APNs (channel management API), records Apple's channel
-- id, or the error, and deletes it at APNs once the row asks for `absent`. A notification whose target is
-- `{"live_activity_channel": "<name>"}` is expanded into one row of `live_activity_channel_sends`, which the worker
-- sends as one broadcast request (`apns-channel-id`) and settles with one `delivery_events` row (no subscription).
--
-- Locks: two new tables; `apps` and `notifications` get foreign keys from them (a SHARE ROW EXCLUSIVE lock for
-- the instant each constraint is added to an empty table: no scan). The group roles' grants gain both tables.
--
-- Only added: a previous release's worker never reads or writes them. It fails a notification with a
-- `live_activity_channel` target as `invalid_target` (an unknown target key), as it always did.
CREATE TABLE live_activity_channels (
    id                     uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id                 uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    -- The producer's own name for the channel (what notifications target), unique per app.
    name                   text NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 200),
    -- Which APNs environment the channel lives in (channels are per environment at Apple).
    environment            text NOT NULL DEFAULT 'production' CHECK (environment IN ('production', 'sandbox')),
    -- Apple's `message-storage-policy`: 0 no message stored, 1 the most recent message stored.
    message_storage_policy smallint NOT NULL DEFAULT 0 CHECK (message_storage_policy IN (0, 1)),
    -- What the producer wants: the channel at APNs (`present`) or gone (`absent`).
    desired_state          text NOT NULL DEFAULT 'present' CHECK (desired_state IN ('present', 'absent')),
    -- Worker-written: `pending` (not yet reconciled), `active` (Apple's channel id recorded), `deleted` (gone at
    -- APNs), `failed` (APNs refused the change: `error_reason`, `error_detail`).
    state                  text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'active', 'deleted', 'failed')),
    -- Apple's channel id (`apns-channel-id` of the create answer, base64 text).
    apple_channel_id       text,
    error_reason           text,
    error_detail           text,
    -- Each change a producer makes to `desired_state` or `message_storage_policy` adds one (a trigger); the
    -- worker reconciles a row while `reconciled_revision` < `revision`, and records the revision it acted on.
    revision               bigint NOT NULL DEFAULT 1,
    reconciled_revision    bigint NOT NULL DEFAULT 0,
    -- Worker-written: the reconciliation's lease (no row lock is held across the APNs request), its attempts
    -- and when it may run again after a transient answer.
    lease_until            timestamptz,
    -- A new value at each lease: a result is written only under the lease it was made under.
    lease_token            uuid,
    attempts               integer NOT NULL DEFAULT 0,
    run_at                 timestamptz NOT NULL DEFAULT now(),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT live_activity_channels_name_once UNIQUE (app_id, name)
);
-- Reconciliation looks for the rows behind their revision, due first.
CREATE INDEX live_activity_channels_to_reconcile ON live_activity_channels (run_at)
    WHERE reconciled_revision < revision;

CREATE FUNCTION live_activity_channels_revise() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.desired_state IS DISTINCT FROM OLD.desired_state
       OR NEW.message_storage_policy IS DISTINCT FROM OLD.message_storage_policy THEN
        NEW.revision := OLD.revision + 1;
        NEW.run_at := now();
        NEW.attempts := 0;
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER live_activity_channels_revise BEFORE UPDATE ON live_activity_channels
    FOR EACH ROW EXECUTE FUNCTION live_activity_channels_revise();

-- One broadcast send per notification that targets a channel: written by expansion, settled (deleted) by the
-- worker with its `delivery_events` row. `run_at` doubles as the lease, `fence` guards the completion, as on
-- `deliveries`.
CREATE TABLE live_activity_channel_sends (
    notification_id uuid PRIMARY KEY REFERENCES notifications (id) ON DELETE CASCADE,
    app_id          uuid NOT NULL,
    channel_name    text NOT NULL,
    -- `apns-request-id` of every attempt, so a resend is recognisably the same broadcast.
    request_id      uuid NOT NULL DEFAULT gen_random_uuid(),
    run_at          timestamptz NOT NULL DEFAULT now(),
    attempt         integer NOT NULL DEFAULT 0,
    fence           bigint NOT NULL DEFAULT 0,
    leased_by       text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX live_activity_channel_sends_due ON live_activity_channel_sends (run_at);

-- pushizo_apply_roles() of 0031 keeps its grants under a name of its own; the function of that name now runs it and
-- grants this migration's tables (pushizo_set_producer_row_security() calls it by name).
ALTER FUNCTION pushizo_apply_roles() RENAME TO pushizo_apply_roles_0031;

DO $do$
DECLARE
    q constant text := quote_ident(current_schema());
BEGIN
    EXECUTE replace($fn$
        CREATE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            PERFORM @s@.pushizo_apply_roles_0031();
            -- Workers reconcile channels and send, settle and delete channel sends.
            IF to_regrole('pushizo_worker') IS NOT NULL THEN
                GRANT SELECT, UPDATE ON @s@.live_activity_channels TO pushizo_worker;
                GRANT SELECT, INSERT, UPDATE, DELETE ON @s@.live_activity_channel_sends TO pushizo_worker;
            END IF;
            -- Producers write channels; a channel send is theirs to read.
            IF to_regrole('pushizo_producer') IS NOT NULL THEN
                GRANT SELECT, INSERT, UPDATE, DELETE ON @s@.live_activity_channels TO pushizo_producer;
                GRANT SELECT ON @s@.live_activity_channel_sends TO pushizo_producer;
            END IF;
            IF to_regrole('pushizo_reader') IS NOT NULL THEN
                GRANT SELECT ON @s@.live_activity_channels, @s@.live_activity_channel_sends TO pushizo_reader;
            END IF;
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_apply_roles_0031() FROM PUBLIC;

SELECT pushizo_apply_roles();
