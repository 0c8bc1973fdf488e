-- Producers' rights on the Live Activity tables of 0035 as on the other producer tables (0027): column grants and
-- the per-app row-level security policies.
--
-- `live_activity_channels`: producers insert `id`, `app_id`, `name`, `environment`, `message_storage_policy` and
-- `desired_state`, and update `desired_state` and `message_storage_policy` (the two columns the revision trigger
-- watches: a change of any other column would never reach APNs). `state`, `apple_channel_id`, `error_reason`,
-- `error_detail` and the reconciliation's bookkeeping (`revision`, `reconciled_revision`, `lease_until`,
-- `lease_token`, `attempts`, `run_at`, `created_at`, `updated_at`) are the worker's alone. Producers keep SELECT and
-- DELETE of whole rows, as on `notifications`.
--
-- Both tables get the policies of 0027 (`pushizo_producer_apps`: the rows of the apps `app_producers` maps the login
-- to; `pushizo_worker_rows` and `pushizo_reader_rows`: every row), and pushizo_set_producer_row_security() switches
-- row-level security on both with the other producer tables. A database whose producers' row security is already on
-- (seen on `notifications`) gets it on both tables here.
--
-- Locks: ALTER TABLE ... ENABLE ROW LEVEL SECURITY and CREATE POLICY take ACCESS EXCLUSIVE on the two tables for an
-- instant (no scan); GRANT and REVOKE change the catalog only.
--
-- Only added, as far as the previous release goes: it never reads or writes these tables.
DO $do$
DECLARE
    schema_name constant text := current_schema();
    q constant text := quote_ident(current_schema());
BEGIN
    -- pushizo_apply_roles() as it stood before this file keeps its grants under a name of its own; the function of
    -- that name runs it and narrows the producers' rights.
    EXECUTE 'ALTER FUNCTION ' || q || '.pushizo_apply_roles() RENAME TO pushizo_apply_roles_before_0036';

    EXECUTE replace(replace($fn$
        CREATE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            t text;
            policy record;
        BEGIN
            PERFORM @s@.pushizo_apply_roles_before_0036();
            IF to_regrole('pushizo_producer') IS NOT NULL THEN
                -- The function run above grants INSERT and UPDATE on the whole table; revoking them also revokes
                -- their column grants, so the column grants follow.
                REVOKE INSERT, UPDATE ON @s@.live_activity_channels FROM pushizo_producer;
                GRANT SELECT, DELETE ON @s@.live_activity_channels TO pushizo_producer;
                GRANT INSERT (id, app_id, name, environment, message_storage_policy, desired_state),
                      UPDATE (message_storage_policy, desired_state)
                    ON @s@.live_activity_channels TO pushizo_producer;
            END IF;

            -- The policies of 0027, inert until row-level security is enabled on the table.
            FOREACH t IN ARRAY ARRAY['live_activity_channels', 'live_activity_channel_sends'] LOOP
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
                        WHERE p.schemaname = '@n@' AND p.tablename = t AND p.policyname = policy.policy_name);
                    EXECUTE format('CREATE POLICY %I ON @s@.%I FOR %s TO %I USING (%s)',
                                   policy.policy_name, t, policy.command, policy.role_name, policy.qual)
                        || CASE WHEN policy.command = 'ALL' THEN format(' WITH CHECK (%s)', policy.qual) ELSE '' END;
                END LOOP;
            END LOOP;
        END;
        $$
    $fn$, '@s@', q), '@n@', schema_name);

    -- 0027's switch with the two tables added to its list.
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
                                     'live_activity_channels', 'live_activity_channel_sends'] LOOP
                EXECUTE format('ALTER TABLE @s@.%I %s ROW LEVEL SECURITY', t, CASE WHEN p_enabled THEN 'ENABLE' ELSE 'DISABLE' END);
            END LOOP;
            PERFORM @s@.pushizo_apply_roles();
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_apply_roles_before_0036() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_set_producer_row_security(boolean) FROM PUBLIC;

SELECT pushizo_apply_roles();

-- Producers' row security already on: the two tables join it now.
DO $do$
BEGIN
    IF (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid = 'notifications'::regclass) THEN
        ALTER TABLE live_activity_channels ENABLE ROW LEVEL SECURITY;
        ALTER TABLE live_activity_channel_sends ENABLE ROW LEVEL SECURITY;
    END IF;
END
$do$;
