-- Step 1 of `pushizo-worker distribute` (docs/scale-out.md, "Triggers and functions", "Row-level security"): the
-- triggers, functions and policies in their Citus forms, on the still local tables. Run once, statement by
-- statement, before any table is distributed; the step is skipped once `deliveries_inserted` is gone and the row
-- trigger `subscriptions_deleted` is in place.
--
-- The owner's sessions may create and keep triggers on distributed tables (Citus runs them on the shards).
ALTER ROLE CURRENT_USER SET citus.enable_unsafe_triggers = on;
-- Dropped: statement triggers reading transition tables (they fail on a shard: "executor could not find named
-- tuplestore"), triggers that NOTIFY (a producer's multi-shard write would fail its 2PC), triggers writing rows of
-- another colocation group, and the update of a distribution column.
DROP TRIGGER IF EXISTS notifications_wake ON notifications;
DROP TRIGGER IF EXISTS deliveries_wake ON deliveries;
DROP TRIGGER IF EXISTS deliveries_inserted ON deliveries;
DROP TRIGGER IF EXISTS notifications_deleted ON notifications;
DROP TRIGGER IF EXISTS notifications_id_changed ON notifications;
DROP TRIGGER IF EXISTS apps_throttle_changed ON apps;
DROP TRIGGER IF EXISTS delivery_events_count_insert ON delivery_events;
DROP TRIGGER IF EXISTS delivery_events_count_update ON delivery_events;
DROP TRIGGER IF EXISTS delivery_events_count_delete ON delivery_events;
-- A deleted subscription's deliveries: a ROW trigger writing the colocated same-key rows (the lane's), which Citus
-- runs on the shard's node.
CREATE OR REPLACE FUNCTION pushizo_subscription_deleted_row() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    EXECUTE format('DELETE FROM %I.deliveries WHERE lane = $1 AND subscription_id = $2', TG_TABLE_SCHEMA)
        USING OLD.lane, OLD.id;
    RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS subscriptions_deleted ON subscriptions;
CREATE TRIGGER subscriptions_deleted AFTER DELETE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION pushizo_subscription_deleted_row();
-- Producer policies read no table: each producer login carries its apps in `pushizo.producer_apps` (a role
-- setting Citus propagates to every node; rewritten from app_producers below). Only the policies there are: none
-- while the group role pushizo_producer is missing; from migration 0037 on, `pushizo_apply_roles()` creates them in
-- this form on a database in its Citus form, and writes the settings again.
DO $do$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES ('apps', 'id'), ('app_channels', 'app_id'), ('users', 'app_id'),
                                   ('subscriptions', 'app_id'), ('notifications', 'app_id'),
                                   ('delivery_events', 'app_id'), ('live_activity_channels', 'app_id'),
                                   ('live_activity_channel_sends', 'app_id'),
                                   ('notification_idempotency_keys', 'app_id')) v(name, app_column) LOOP
        CONTINUE WHEN NOT EXISTS (SELECT FROM pg_policy WHERE polrelid = to_regclass(t.name)
                                                          AND polname = 'pushizo_producer_apps');
        EXECUTE format(
            'ALTER POLICY pushizo_producer_apps ON %1$I USING (%2$I = ANY (%3$s)) WITH CHECK (%2$I = ANY (%3$s))',
            t.name, t.app_column, $$string_to_array(current_setting('pushizo.producer_apps', true), ',')::uuid[]$$);
    END LOOP;
END
$do$;
DO $do$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT role_name, string_agg(app_id::text, ',' ORDER BY app_id) AS apps
             FROM app_producers GROUP BY role_name LOOP
        EXECUTE format('ALTER ROLE %I SET pushizo.producer_apps = %L', r.role_name, r.apps);
    END LOOP;
END
$do$;
