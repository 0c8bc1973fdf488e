-- Producers' idempotency keys in a table of their own, for a database distributed with Citus, and the roles'
-- policies in their Citus form on such a database (docs/scale-out.md, "Keys and constraints", "Row-level security").
--
-- `notification_idempotency_keys` (app_id, idempotency_key) -> notification_id: on a distributed database
-- `notifications` is distributed by `id`, and Citus refuses a unique index without the distribution column, so the
-- unique index of 0033 cannot stay there. This table's primary key holds the app's keys instead, on one shard per app
-- once the distribute step has distributed it by `app_id`; a producer inserts the key and the notification in one
-- transaction (docs/producer-contract.md, "Idempotent inserts"). On a single PostgreSQL it stays empty: producers
-- keep 0033's `ON CONFLICT` on `notifications`. The maintenance deletes keys older than the 30-day window.
--
-- `pushizo_citus_form()`: whether the distribute step has put the schema in its Citus form (its step 1's row trigger
-- `subscriptions_deleted` is in place). Then `pushizo_apply_roles()` writes producer policies that read the login's
-- role setting `pushizo.producer_apps` (Citus refuses a policy with a subquery on a distributed table, and a table
-- that has one cannot be distributed), creating them in that form before the older grant functions would create
-- them with a subquery, and rewrites each producer login's setting from `app_producers`. On a single PostgreSQL it
-- does what it did. There it also runs the rest of its transaction in Citus's sequential mode (its grants reach
-- reference tables after distributed ones, which Citus refuses over parallel connections).
--
-- Only added: a new table (no foreign key: on a distributed database a local table referencing the reference table
-- `apps` would become a Citus local table), two functions, and the grant functions wrapped as before. The previous
-- release never reads or writes the table. Locks: none beyond the new table's.
CREATE TABLE notification_idempotency_keys (
    app_id          uuid NOT NULL,
    -- 0033's form: 1 to 64 characters of visible ASCII (a range of code points, whatever the collation).
    idempotency_key text NOT NULL CONSTRAINT notification_idempotency_keys_form CHECK (idempotency_key ~ '^[!-~]{1,64}$'),
    notification_id uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, idempotency_key)
);
-- The maintenance's way to the keys past the window, oldest first.
CREATE INDEX notification_idempotency_keys_age ON notification_idempotency_keys (created_at);

DO $do$
DECLARE
    schema_name constant text := current_schema();
    q constant text := quote_ident(current_schema());
BEGIN
    EXECUTE replace(replace($fn$
        CREATE FUNCTION @s@.pushizo_citus_form() RETURNS boolean
            LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
            SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
                           WHERE t.tgrelid = '@s@.subscriptions'::regclass AND t.tgname = 'subscriptions_deleted'
                             AND p.proname = 'pushizo_subscription_deleted_row'
                             AND p.pronamespace = '@n@'::regnamespace)
        $$
    $fn$, '@s@', q), '@n@', schema_name);

    -- pushizo_apply_roles() of 0036 keeps its grants under a name of its own; the function of that name runs it,
    -- with the producer policies in their Citus form first on a distributed database.
    EXECUTE 'ALTER FUNCTION ' || q || '.pushizo_apply_roles() RENAME TO pushizo_apply_roles_0036';

    EXECUTE replace(replace($fn$
        CREATE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            citus constant boolean := @s@.pushizo_citus_form();
            -- The producer's apps from its role setting (a uuid list; unset: none, so the policy passes no row).
            setting_apps constant text := $q$string_to_array(current_setting('pushizo.producer_apps', true), ',')::uuid[]$q$;
            t record;
            r record;
            policy record;
            wanted text;
        BEGIN
            -- The grants reach reference tables after distributed ones in one transaction, which Citus runs only
            -- over one connection per node ("cannot execute DDL on table ... because there was a parallel DDL
            -- access"): for the rest of the transaction.
            IF citus THEN
                PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);
            END IF;
            IF citus AND to_regrole('pushizo_producer') IS NOT NULL THEN
                FOR t IN SELECT * FROM (VALUES ('apps', 'id'), ('app_channels', 'app_id'), ('users', 'app_id'),
                                               ('subscriptions', 'app_id'), ('notifications', 'app_id'),
                                               ('delivery_events', 'app_id'), ('live_activity_channels', 'app_id'),
                                               ('live_activity_channel_sends', 'app_id'),
                                               ('notification_idempotency_keys', 'app_id')) v(name, app_column) LOOP
                    wanted := format('%I = ANY (%s)', t.app_column, setting_apps);
                    SELECT p.polname, pg_catalog.pg_get_expr(p.polqual, p.polrelid) AS qual INTO policy
                    FROM pg_catalog.pg_policy p
                    WHERE p.polrelid = format('@s@.%I', t.name)::regclass AND p.polname = 'pushizo_producer_apps';
                    IF NOT FOUND THEN
                        EXECUTE format('CREATE POLICY pushizo_producer_apps ON @s@.%I FOR ALL TO pushizo_producer USING (%s) WITH CHECK (%s)',
                                       t.name, wanted, wanted);
                    ELSIF policy.qual NOT LIKE '%pushizo.producer_apps%' THEN
                        EXECUTE format('ALTER POLICY pushizo_producer_apps ON @s@.%I USING (%s) WITH CHECK (%s)',
                                       t.name, wanted, wanted);
                    END IF;
                END LOOP;
            END IF;

            PERFORM @s@.pushizo_apply_roles_0036();

            -- Producers insert and read back their keys; the maintenance deletes them past the window.
            IF to_regrole('pushizo_worker') IS NOT NULL THEN
                GRANT SELECT, DELETE ON @s@.notification_idempotency_keys TO pushizo_worker;
            END IF;
            -- created_at too: Citus writes a row's defaults into the statement it sends to the shard, where the
            -- producer then needs the right on that column (a producer may only date its own keys).
            IF to_regrole('pushizo_producer') IS NOT NULL THEN
                GRANT SELECT ON @s@.notification_idempotency_keys TO pushizo_producer;
                GRANT INSERT (app_id, idempotency_key, notification_id, created_at)
                    ON @s@.notification_idempotency_keys TO pushizo_producer;
            END IF;
            IF to_regrole('pushizo_reader') IS NOT NULL THEN
                GRANT SELECT ON @s@.notification_idempotency_keys TO pushizo_reader;
            END IF;
            -- The policies of 0027, inert until row-level security is enabled on the table (on a distributed
            -- database the producers' one was made above).
            FOR policy IN
                SELECT * FROM (VALUES
                    ('pushizo_worker', 'pushizo_worker_rows', 'ALL', 'true'),
                    ('pushizo_reader', 'pushizo_reader_rows', 'SELECT', 'true'),
                    ('pushizo_producer', 'pushizo_producer_apps', 'ALL',
                     'app_id IN (SELECT p.app_id FROM @s@.app_producers p WHERE p.role_name OPERATOR(pg_catalog.=) current_user)')
                ) AS v (role_name, policy_name, command, qual)
            LOOP
                CONTINUE WHEN to_regrole(policy.role_name) IS NULL OR EXISTS (
                    SELECT 1 FROM pg_catalog.pg_policies p
                    WHERE p.schemaname = '@n@' AND p.tablename = 'notification_idempotency_keys'
                      AND p.policyname = policy.policy_name);
                EXECUTE format('CREATE POLICY %I ON @s@.notification_idempotency_keys FOR %s TO %I USING (%s)',
                               policy.policy_name, policy.command, policy.role_name, policy.qual)
                    || CASE WHEN policy.command = 'ALL' THEN format(' WITH CHECK (%s)', policy.qual) ELSE '' END;
            END LOOP;

            -- Each producer login's apps, as its role setting (Citus propagates ALTER ROLE to every node); a login
            -- whose mappings are all gone keeps an empty list.
            IF citus THEN
                FOR r IN
                    SELECT ro.rolname, coalesce(string_agg(m.app_id::text, ',' ORDER BY m.app_id), '') AS apps,
                           (SELECT s.setconfig FROM pg_catalog.pg_db_role_setting s
                            WHERE s.setrole = ro.oid AND s.setdatabase = 0) AS config
                    FROM pg_catalog.pg_roles ro
                    LEFT JOIN @s@.app_producers m ON m.role_name = ro.rolname
                    WHERE EXISTS (SELECT 1 FROM @s@.app_producers m2 WHERE m2.role_name = ro.rolname)
                       OR EXISTS (SELECT 1 FROM pg_catalog.pg_db_role_setting s, unnest(s.setconfig) c
                                  WHERE s.setrole = ro.oid AND s.setdatabase = 0 AND c LIKE 'pushizo.producer_apps=%')
                    GROUP BY ro.rolname, ro.oid
                LOOP
                    CONTINUE WHEN ('pushizo.producer_apps=' || r.apps) = ANY (coalesce(r.config, '{}'));
                    EXECUTE format('ALTER ROLE %I SET pushizo.producer_apps = %L', r.rolname, r.apps);
                END LOOP;
            END IF;
        END;
        $$
    $fn$, '@s@', q), '@n@', schema_name);

    -- 0036's switch with the keys table added to its list.
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_set_producer_row_security(p_enabled boolean) RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            t text;
        BEGIN
            IF p_enabled AND (to_regrole('pushizo_worker') IS NULL OR to_regrole('pushizo_producer') IS NULL
                              OR to_regrole('pushizo_reader') IS NULL) THEN
                RAISE EXCEPTION 'row-level security needs the roles pushizo_worker, pushizo_producer and pushizo_reader'
                    USING HINT = 'create them (docs/operations.md, "Roles") and run SELECT pushizo_apply_roles()';
            END IF;
            FOREACH t IN ARRAY ARRAY['apps', 'app_channels', 'users', 'subscriptions', 'notifications', 'delivery_events',
                                     'live_activity_channels', 'live_activity_channel_sends',
                                     'notification_idempotency_keys'] LOOP
                EXECUTE format('ALTER TABLE @s@.%I %s ROW LEVEL SECURITY', t, CASE WHEN p_enabled THEN 'ENABLE' ELSE 'DISABLE' END);
            END LOOP;
            PERFORM @s@.pushizo_apply_roles();
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_apply_roles_0036() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_set_producer_row_security(boolean) FROM PUBLIC;

SELECT pushizo_apply_roles();

-- Producers' row security already on: the keys table joins it now.
DO $do$
BEGIN
    IF (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid = 'notifications'::regclass) THEN
        ALTER TABLE notification_idempotency_keys ENABLE ROW LEVEL SECURITY;
    END IF;
END
$do$;
