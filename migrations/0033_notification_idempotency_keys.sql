-- pushizo:no-transaction
-- Idempotent producers (docs/producer-contract.md, "Idempotent inserts"): `notifications.idempotency_key`, an
-- optional key unique per app while it is younger than 30 days (the window OneSignal keeps its `idempotency_key`
-- for). A producer that retries an insert after a timeout inserts with the same key and
-- `ON CONFLICT (app_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`: the retry cannot create a
-- second notification. The worker's maintenance clears keys past the window (docs/data-lifecycle.md), so the index
-- holds only the last 30 days' keys and a key can be used again after it.
--
-- The key is 1 to 64 characters of visible ASCII (0x21 to 0x7E): a UUID (36) or a SHA-256 in hex (64) fits. Bounded,
-- so an index entry stays small (a B-tree refuses an entry over about 2.7 kB, and would fail the producer's insert
-- with an error about the index); ASCII without spaces or control characters, so two keys are equal exactly when
-- their bytes are, under any collation, and no layer between a producer and its retry can trim or re-encode one.
--
-- Only added: a previous release reads and writes notifications by name and never sees the column; producers that
-- do not set it insert exactly as before (NULL: no key, no index entry, no conflict).
--
-- Runs outside a transaction (the indexes are built CONCURRENTLY: producers' inserts and the workers' updates of
-- notifications go on while they build); every statement can run again after an interruption. Locks: adding the
-- column and the NOT VALID constraint take ACCESS EXCLUSIVE on notifications for an instant (no scan, no rewrite);
-- VALIDATE scans the table under SHARE UPDATE EXCLUSIVE, which lets reads and writes go on.
ALTER TABLE notifications ADD COLUMN IF NOT EXISTS idempotency_key text;

DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conrelid = 'notifications'::regclass AND conname = 'notifications_idempotency_key_form') THEN
        -- The class is spelt out as a range of code points: PostgreSQL's regular expressions compare bracket
        -- ranges by code point, whatever the database's collation.
        ALTER TABLE notifications ADD CONSTRAINT notifications_idempotency_key_form
            CHECK (idempotency_key ~ '^[!-~]{1,64}$') NOT VALID;
    END IF;
END
$do$;

ALTER TABLE notifications VALIDATE CONSTRAINT notifications_idempotency_key_form;

-- The producers' conflict target. Partial: notifications without a key (all of them, for producers that do not
-- use keys) have no entry, and the maintenance takes keys out of it past the window, so its size is the last 30
-- days' keyed notifications.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS notifications_idempotency_key
    ON notifications (app_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- The maintenance's way to the keys past the window, oldest first, without reading the other notifications.
CREATE INDEX CONCURRENTLY IF NOT EXISTS notifications_idempotency_key_age
    ON notifications (created_at) WHERE idempotency_key IS NOT NULL;

-- Producers may write the key when they insert (never update it: a notification's key is fixed while it holds
-- one). pushizo_apply_roles() as it stood before this file keeps its grants under a name of its own; the
-- function of that name runs it and adds the key's grant. Checked first, so a second run renames nothing.
DO $do$
DECLARE
    q constant text := quote_ident(current_schema());
BEGIN
    IF to_regprocedure(current_schema() || '.pushizo_apply_roles_before_0033()') IS NULL THEN
        EXECUTE 'ALTER FUNCTION ' || q || '.pushizo_apply_roles() RENAME TO pushizo_apply_roles_before_0033';
    END IF;
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            PERFORM @s@.pushizo_apply_roles_before_0033();
            IF to_regrole('pushizo_producer') IS NOT NULL THEN
                GRANT INSERT (idempotency_key) ON @s@.notifications TO pushizo_producer;
            END IF;
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_apply_roles_before_0033() FROM PUBLIC;

SELECT pushizo_apply_roles();
