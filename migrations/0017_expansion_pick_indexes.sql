-- The expand loop's two picks, each through an index that holds only what it may take.
--
-- Both picks walk notifications in serving order (expansion_touched_at NULLS FIRST, created_at) and test each row:
-- through notifications_to_expand they read every row that sorts ahead of the first one they may take. Two kinds
-- of rows did:
--  - pending small notifications, for the chunk step's pick of everything else (they sort first, never
--    touched): about 2,000 rows a pick at 5,000 notifications a second, more as expansion fell behind;
--  - notifications scheduled for later (send_after in the future), for both picks, on every pick while they
--    wait: with 70,000 scheduled, 19.5 ms a bulk pick and 4.8 ms a chunk pick.
--
-- 1. `scheduled`, kept by the worker (producers never write it): true while send_after lies ahead. Set when a
--    row is written with a send_after (a row trigger that fires only then, so producers' immediate inserts pay
--    nothing), and cleared by the worker once send_after has passed (QueueStore.releaseScheduled, through
--    notifications_scheduled). The picks still test send_after themselves, so a row released late is never
--    picked early.
ALTER TABLE notifications ADD COLUMN scheduled boolean NOT NULL DEFAULT false;

CREATE FUNCTION pushizo_notification_scheduled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.scheduled := coalesce(NEW.send_after > now(), false);
    RETURN NEW;
END;
$$;
CREATE TRIGGER notifications_scheduled BEFORE INSERT OR UPDATE OF send_after ON notifications
    FOR EACH ROW WHEN (NEW.send_after IS NOT NULL OR NEW.scheduled)
    EXECUTE FUNCTION pushizo_notification_scheduled();

UPDATE notifications SET scheduled = true
WHERE status IN ('pending', 'expanding') AND send_after > now();

CREATE INDEX notifications_scheduled ON notifications (send_after) WHERE scheduled;

-- 2. Each pick's index. Their predicates are the picks' own clauses word for word, so the planner can use them
--    (ExpansionTests checks the rows each pick reads); the small ones' is QueueStore.smallNotificationPredicate:
--    change both together.
CREATE INDEX notifications_to_expand_small ON notifications (expansion_touched_at NULLS FIRST, created_at)
    WHERE status IN ('pending', 'expanding') AND NOT scheduled
      AND (status = 'pending' AND expansion_touched_at IS NULL AND expansion_cursor IS NULL
           AND (target ? 'include_subscription_ids' OR target ? 'include_external_ids')
           AND octet_length(target::text) <= 8192);
CREATE INDEX notifications_to_expand_large ON notifications (expansion_touched_at NULLS FIRST, created_at)
    WHERE status IN ('pending', 'expanding') AND NOT scheduled
      AND NOT (status = 'pending' AND expansion_touched_at IS NULL AND expansion_cursor IS NULL
               AND (target ? 'include_subscription_ids' OR target ? 'include_external_ids')
               AND octet_length(target::text) <= 8192);
