-- What inserting a delivery costs (docs/performance.md, "Expansion and the deliveries schema"): every index and
-- key of deliveries is paid once per row of every expansion, so two that were measured as the largest share
-- and can be had more cheaply go.
--
-- 1. deliveries_claim_order (priority DESC, run_at) held every delivery a second time beside the partial index
-- deliveries_claim_unthrottled of 0012, which has the same columns: the claim reads only the two partial
-- indexes, and the queue lag and `status` now read them as well (an unlimited app's rows through
-- deliveries_claim_unthrottled, a limited app's through deliveries_claim_throttled).
-- Dropped inside the migration's transaction: on a large queue this takes a moment's lock, like 0009 and 0012.
DROP INDEX deliveries_claim_order;

-- 2. The foreign key deliveries.notification_id -> notifications ran its check once per inserted row (a query
-- and a FOR KEY SHARE lock on the same notification, 5,000 times a chunk). What it gave is kept by triggers
-- that work once per statement:
--  - an insert's new deliveries must name existing notifications, which it locks FOR KEY SHARE until the end of
--    the transaction, as the key's check did (so a concurrent delete waits, or the insert fails with
--    foreign_key_violation, SQLSTATE 23503, as before); once per distinct notification of the statement, in
--    the statement trigger that already reads the new rows for the throttle flag;
--  - deleting notifications deletes their deliveries (the key's ON DELETE CASCADE), through the unique index's
--    leading column;
--  - a delivery's notification_id cannot be changed, and a notification's id cannot be changed while
--    deliveries name it (what the key refused on UPDATE). Row triggers on the column only: no other UPDATE
--    (claims, completions) fires them.
-- Expansion updates the notification row in the transaction that inserts its deliveries, so a delete racing an
-- expansion either runs first (the insert then fails, or the pick no longer finds the notification) or waits
-- for it and then sees, and deletes, the committed deliveries (a REPEATABLE READ delete fails to serialize).
ALTER TABLE deliveries DROP CONSTRAINT deliveries_notification_id_fkey;

CREATE FUNCTION pushizo_deliveries_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wanted uuid[];
    locked bigint;
BEGIN
    SELECT array_agg(w.notification_id) INTO wanted FROM (SELECT DISTINCT notification_id FROM new_deliveries) w;
    IF wanted IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM notifications WHERE id = ANY (wanted) FOR KEY SHARE;
    GET DIAGNOSTICS locked = ROW_COUNT;
    IF locked < cardinality(wanted) THEN
        RAISE EXCEPTION 'insert or update on table "deliveries" violates its notification reference'
            USING ERRCODE = 'foreign_key_violation', TABLE = 'deliveries', COLUMN = 'notification_id',
                  DETAIL = format('Key (notification_id)=(%s) is not present in table "notifications".',
                                  (SELECT w FROM unnest(wanted) w
                                   WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = w) LIMIT 1));
    END IF;
    IF EXISTS (SELECT 1 FROM apps WHERE max_sends_per_second IS NOT NULL) THEN
        UPDATE deliveries d SET throttled = true
        FROM new_deliveries n JOIN apps a ON a.id = n.app_id
        WHERE d.id = n.id AND a.max_sends_per_second IS NOT NULL AND NOT d.throttled;
    END IF;
    RETURN NULL;
END;
$$;
DROP TRIGGER deliveries_throttle_flag ON deliveries;
DROP FUNCTION pushizo_flag_throttled_deliveries();
CREATE TRIGGER deliveries_inserted AFTER INSERT ON deliveries
    REFERENCING NEW TABLE AS new_deliveries FOR EACH STATEMENT EXECUTE FUNCTION pushizo_deliveries_inserted();

CREATE FUNCTION pushizo_delivery_notification_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a delivery''s notification_id cannot change'
        USING ERRCODE = 'foreign_key_violation', TABLE = 'deliveries', COLUMN = 'notification_id';
END;
$$;
CREATE TRIGGER deliveries_notification_fixed BEFORE UPDATE OF notification_id ON deliveries
    FOR EACH ROW WHEN (NEW.notification_id IS DISTINCT FROM OLD.notification_id)
    EXECUTE FUNCTION pushizo_delivery_notification_fixed();

-- Runs as its owner, as the key's cascade did: a role allowed to delete notifications needs no rights on the queue.
CREATE FUNCTION pushizo_notifications_deleted() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    DELETE FROM deliveries d USING gone WHERE d.notification_id = gone.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER notifications_deleted AFTER DELETE ON notifications
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pushizo_notifications_deleted();

CREATE FUNCTION pushizo_notification_id_changed() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM deliveries WHERE notification_id = OLD.id) THEN
        RAISE EXCEPTION 'update on table "notifications" would leave deliveries without their notification'
            USING ERRCODE = 'foreign_key_violation', TABLE = 'notifications', COLUMN = 'id';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER notifications_id_changed AFTER UPDATE OF id ON notifications
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id) EXECUTE FUNCTION pushizo_notification_id_changed();

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION pushizo_notifications_deleted() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION pushizo_notification_id_changed() SET search_path = %I, pg_temp', current_schema());
END;
$$;
