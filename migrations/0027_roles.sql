-- The roles a deployment needs, and optional row-level security per app for producers (docs/operations.md, "Roles").
--
-- Three group roles (NOLOGIN): pushizo_worker (what `run`, `check` and the maintenance read and write),
-- pushizo_producer (the producer contract's tables, docs/producer-contract.md) and pushizo_reader (`status` and
-- dashboards: everything but secrets). The schema owner is the role that runs the migrations; it needs no group.
-- Operators create login roles in them: CREATE ROLE api LOGIN PASSWORD '...' IN ROLE pushizo_producer.
--
-- Roles belong to the cluster, not the database: they are created only when absent, and only when the role running
-- the migrations may (CREATEROLE or superuser). Operators often run migrations as a plain owner: then the roles are
-- skipped with a NOTICE and the migration goes on; after creating them by hand (CREATE ROLE pushizo_worker NOLOGIN;
-- ... as a role with CREATEROLE), the owner runs SELECT pushizo_apply_roles() to give them their rights.
-- Two databases migrated at once may both try to create a role: the loser's unique_violation is the other's success.
--
-- pushizo_apply_roles() grants each existing group role exactly its rights and creates the row-level security
-- policies; the owner runs it again after creating roles, and later migrations that add tables or columns extend it.
-- Column grants (the reader's, the producer's INSERT/UPDATE) name columns one by one, so a column added later is
-- nobody's until a migration grants it: a new secret column is never readable by accident.
--
-- Row-level security is off until the owner runs SELECT pushizo_set_producer_row_security(true): then a producer login
-- sees and writes only the rows of the apps app_producers maps it to (apps, app_channels, users, subscriptions,
-- notifications, delivery_events), while the worker and the reader see every row through policies of their own
-- (USING (true), which the planner drops: the worker's statements plan as before). The queue's own tables
-- (deliveries, app_claim_turns, ...) carry no policy, producers have no right on them. Owner-rights functions and
-- the owner bypass row-level security (the tables' owner is not subject to it without FORCE).
--
-- Two triggers that producers' statements fire wrote tables producers have no right on: deleting subscriptions
-- deleted their deliveries, and inserting delivery_events (the API's received/opened events) appended count deltas.
-- They now run with the owner's rights, with search_path pinned like 0024's and the schema written into each name.
DO $do$
DECLARE
    role_name text;
BEGIN
    FOREACH role_name IN ARRAY ARRAY['pushizo_worker', 'pushizo_producer', 'pushizo_reader'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = role_name);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'role % not created: % may not create roles; create it as a role with CREATEROLE (CREATE ROLE % NOLOGIN), then run SELECT pushizo_apply_roles() as the schema owner',
                    role_name, current_user, role_name;
            WHEN duplicate_object OR unique_violation THEN
                NULL;
        END;
    END LOOP;
END
$do$;

CREATE TABLE app_producers (
    role_name name NOT NULL,
    app_id uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    PRIMARY KEY (role_name, app_id)
);
CREATE INDEX app_producers_app ON app_producers (app_id);
-- Always on: a producer reads its own mapping only (the policies below look it up with the producer's rights).
ALTER TABLE app_producers ENABLE ROW LEVEL SECURITY;

DO $do$
DECLARE
    schema_name constant text := current_schema();
    q constant text := quote_ident(current_schema());
BEGIN
    IF schema_name ~ '[''%]' THEN
        RAISE EXCEPTION 'schema name % holds a single quote or a percent sign; run the migrations in a schema without either', q;
    END IF;

    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_subscriptions_deleted() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            DELETE FROM @s@.deliveries d USING gone WHERE d.subscription_id = gone.id;
            RETURN NULL;
        END;
        $$
    $fn$, '@s@', q);

    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_count_events() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            IF TG_OP IN ('INSERT', 'UPDATE') THEN
                INSERT INTO @s@.notification_event_counts (notification_id, sent, failed, skipped, deferred)
                SELECT notification_id,
                       count(*) FILTER (WHERE event = 'sent'), count(*) FILTER (WHERE event = 'failed'),
                       count(*) FILTER (WHERE event = 'skipped'), count(*) FILTER (WHERE event = 'deferred')
                FROM pushizo_new_events
                WHERE event IN ('sent', 'failed', 'skipped', 'deferred')
                GROUP BY notification_id;
            END IF;
            IF TG_OP IN ('DELETE', 'UPDATE') THEN
                INSERT INTO @s@.notification_event_counts (notification_id, sent, failed, skipped, deferred)
                SELECT notification_id,
                       -count(*) FILTER (WHERE event = 'sent'), -count(*) FILTER (WHERE event = 'failed'),
                       -count(*) FILTER (WHERE event = 'skipped'), -count(*) FILTER (WHERE event = 'deferred')
                FROM pushizo_old_events
                WHERE event IN ('sent', 'failed', 'skipped', 'deferred')
                GROUP BY notification_id;
            END IF;
            RETURN NULL;
        END;
        $$
    $fn$, '@s@', q);

    -- Grants and policies of every group role that exists. Run by the schema owner (GRANT and CREATE POLICY need
    -- ownership); idempotent. While producers' row-level security is on, producers keep no SELECT on
    -- notification_counts: the view reads notifications with its owner's rights, past the policies.
    EXECUTE replace(replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            producer_tables constant text[] := ARRAY['apps', 'app_channels', 'users', 'subscriptions', 'notifications', 'delivery_events'];
            t text;
            producer_rows text;
            policy record;
            missing text[] := '{}';
        BEGIN
            IF to_regrole('pushizo_worker') IS NOT NULL THEN
                GRANT USAGE ON SCHEMA @s@ TO pushizo_worker;
                GRANT SELECT, INSERT, UPDATE, DELETE ON @s@.deliveries, @s@.notification_event_counts,
                    @s@.app_claim_turns, @s@.app_send_buckets, @s@.expansion_slices, @s@.frequency_cap_grants,
                    @s@.provider_tokens TO pushizo_worker;
                GRANT SELECT, INSERT ON @s@.delivery_events TO pushizo_worker;
                -- Rows that reached the default partition expire from it directly (docs/data-lifecycle.md).
                GRANT SELECT, DELETE ON @s@.delivery_events_default TO pushizo_worker;
                GRANT SELECT, UPDATE, DELETE ON @s@.notifications TO pushizo_worker;
                GRANT SELECT, UPDATE ON @s@.subscriptions, @s@.app_channels TO pushizo_worker;
                GRANT SELECT, INSERT, UPDATE ON @s@.queue_depth_samples TO pushizo_worker;
                GRANT SELECT ON @s@.apps, @s@.users, @s@.time_zone_names, @s@.notification_counts TO pushizo_worker;
                GRANT USAGE, SELECT ON SEQUENCE @s@.deliveries_id_seq, @s@.delivery_events_id_seq TO pushizo_worker;
                GRANT EXECUTE ON FUNCTION @s@.pushizo_create_event_partition(date),
                    @s@.pushizo_drop_event_partition(text, float8),
                    @s@.pushizo_refresh_grown_statistics(float8, integer, bigint) TO pushizo_worker;
            ELSE
                missing := missing || 'pushizo_worker'::text;
            END IF;

            IF to_regrole('pushizo_producer') IS NOT NULL THEN
                GRANT USAGE ON SCHEMA @s@ TO pushizo_producer;
                -- claim_weight is the operator's: an app's share of every claim beside the other apps.
                GRANT SELECT, DELETE ON @s@.apps TO pushizo_producer;
                GRANT INSERT (id, name, default_language, default_timezone, quiet_hours_start, quiet_hours_end,
                              frequency_caps, signing_key, max_sends_per_second),
                      UPDATE (name, default_language, default_timezone, quiet_hours_start, quiet_hours_end,
                              frequency_caps, signing_key, max_sends_per_second)
                    ON @s@.apps TO pushizo_producer;
                GRANT SELECT, INSERT, UPDATE, DELETE ON @s@.app_channels, @s@.users, @s@.subscriptions TO pushizo_producer;
                -- The worker's bookkeeping columns (status_reason, targeted_count, expansion_*, scheduled, ...) are
                -- the worker's alone.
                GRANT SELECT, DELETE ON @s@.notifications TO pushizo_producer;
                GRANT INSERT (id, app_id, campaign_id, message, target, send_after, status),
                      UPDATE (campaign_id, message, target, send_after, status)
                    ON @s@.notifications TO pushizo_producer;
                -- The API's received / opened / clicked / dismissed events.
                GRANT SELECT, INSERT ON @s@.delivery_events TO pushizo_producer;
                GRANT USAGE ON SEQUENCE @s@.delivery_events_id_seq TO pushizo_producer;
                GRANT SELECT ON @s@.app_producers TO pushizo_producer;
                IF (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid = '@s@.notifications'::regclass) THEN
                    REVOKE SELECT ON @s@.notification_counts FROM pushizo_producer;
                ELSE
                    GRANT SELECT ON @s@.notification_counts TO pushizo_producer;
                END IF;
            ELSE
                missing := missing || 'pushizo_producer'::text;
            END IF;

            IF to_regrole('pushizo_reader') IS NOT NULL THEN
                GRANT USAGE ON SCHEMA @s@ TO pushizo_reader;
                -- Not apps.signing_key, app_channels.settings (private keys), subscriptions.token (a Web Push
                -- endpoint is a capability), web_p256dh / web_auth, nor provider_tokens.
                GRANT SELECT (id, name, default_language, default_timezone, quiet_hours_start, quiet_hours_end,
                              frequency_caps, created_at, max_sends_per_second, claim_weight) ON @s@.apps TO pushizo_reader;
                GRANT SELECT (app_id, provider, endpoint, paused_until, paused_reason, updated_at)
                    ON @s@.app_channels TO pushizo_reader;
                GRANT SELECT (id, app_id, user_id, platform, apns_environment, language, timezone, country, status,
                              invalid_reason, token_updated_at, created_at, kind) ON @s@.subscriptions TO pushizo_reader;
                GRANT SELECT ON @s@.users, @s@.notifications, @s@.deliveries, @s@.delivery_events,
                    @s@.notification_counts, @s@.notification_event_counts, @s@.app_claim_turns, @s@.app_send_buckets,
                    @s@.expansion_slices, @s@.frequency_cap_grants, @s@.queue_depth_samples, @s@.time_zone_names,
                    @s@.app_producers TO pushizo_reader;
            ELSE
                missing := missing || 'pushizo_reader'::text;
            END IF;

            -- `migrate` as the worker finds the schema up to date; `check` as either reports pending migrations.
            -- The migrator creates its bookkeeping table before the first migration; other tools may not.
            IF to_regclass('@s@.pushizo_schema_migrations') IS NOT NULL THEN
                IF to_regrole('pushizo_worker') IS NOT NULL THEN
                    GRANT SELECT ON @s@.pushizo_schema_migrations TO pushizo_worker;
                END IF;
                IF to_regrole('pushizo_reader') IS NOT NULL THEN
                    GRANT SELECT ON @s@.pushizo_schema_migrations TO pushizo_reader;
                END IF;
            END IF;

            -- Policies: inert until row-level security is enabled on the table. A producer's rows are those of
            -- the apps its login is mapped to; in app_producers, its own mapping (read only).
            FOREACH t IN ARRAY producer_tables || 'app_producers'::text LOOP
                producer_rows := CASE t
                    WHEN 'app_producers' THEN 'role_name OPERATOR(pg_catalog.=) current_user'
                    ELSE format('%I IN (SELECT p.app_id FROM @s@.app_producers p WHERE p.role_name OPERATOR(pg_catalog.=) current_user)',
                                CASE t WHEN 'apps' THEN 'id' ELSE 'app_id' END)
                END;
                FOR policy IN
                    SELECT * FROM (VALUES
                        ('pushizo_worker', 'pushizo_worker_rows', 'ALL', 'true'),
                        ('pushizo_reader', 'pushizo_reader_rows', 'SELECT', 'true'),
                        ('pushizo_producer', 'pushizo_producer_apps', CASE t WHEN 'app_producers' THEN 'SELECT' ELSE 'ALL' END, producer_rows)
                    ) AS v (role_name, policy_name, command, qual)
                LOOP
                    -- The worker never reads the mapping: a worker role given rights on every table by default
                    -- privileges (an older setup) still reaches none of its rows.
                    CONTINUE WHEN (t = 'app_producers' AND policy.role_name = 'pushizo_worker')
                        OR to_regrole(policy.role_name) IS NULL OR EXISTS (
                        SELECT 1 FROM pg_catalog.pg_policies p
                        WHERE p.schemaname = '@n@' AND p.tablename = t AND p.policyname = policy.policy_name);
                    EXECUTE format('CREATE POLICY %I ON @s@.%I FOR %s TO %I USING (%s)',
                                   policy.policy_name, t, policy.command, policy.role_name, policy.qual)
                        || CASE WHEN policy.command = 'ALL' THEN format(' WITH CHECK (%s)', policy.qual) ELSE '' END;
                END LOOP;
            END LOOP;

            IF cardinality(missing) > 0 THEN
                RAISE NOTICE 'roles % do not exist: nothing granted to them; create them (CREATE ROLE ... NOLOGIN, needs CREATEROLE) and run SELECT pushizo_apply_roles() again',
                    array_to_string(missing, ', ');
            END IF;
        END;
        $$
    $fn$, '@s@', q), '@n@', schema_name);

    -- The operator's switch: producers then reach only their mapped apps' rows. Refused while a group role is
    -- missing (a worker login outside pushizo_worker would then see no row at all).
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
            FOREACH t IN ARRAY ARRAY['apps', 'app_channels', 'users', 'subscriptions', 'notifications', 'delivery_events'] LOOP
                EXECUTE format('ALTER TABLE @s@.%I %s ROW LEVEL SECURITY', t, CASE WHEN p_enabled THEN 'ENABLE' ELSE 'DISABLE' END);
            END LOOP;
            PERFORM @s@.pushizo_apply_roles();
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_set_producer_row_security(boolean) FROM PUBLIC;

SELECT pushizo_apply_roles();
