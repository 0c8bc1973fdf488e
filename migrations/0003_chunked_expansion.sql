-- Chunked, resumable audience expansion (issue 6, docs/targets.md). One chunk = one short transaction that
-- inserts that chunk's deliveries and saves the cursor together, so a crash resumes after the last chunk.
ALTER TABLE notifications
    -- The last subscriptions.id a committed chunk looked at (keyset pagination); NULL = not started.
    ADD COLUMN expansion_cursor     uuid,
    -- When the last chunk committed. Expansion picks the least recently served notification first (NULL =
    -- never), so a small notification created during a broadcast is expanded before its next chunk.
    ADD COLUMN expansion_touched_at timestamptz,
    -- When the worker turned a canceled notification's pending deliveries into skipped/canceled.
    ADD COLUMN cancel_swept_at      timestamptz;

DROP INDEX notifications_to_expand;
CREATE INDEX notifications_to_expand ON notifications (expansion_touched_at NULLS FIRST, created_at)
    WHERE status IN ('pending', 'expanding');
CREATE INDEX notifications_to_sweep ON notifications (created_at)
    WHERE status = 'canceled' AND cancel_swept_at IS NULL;

-- A text as numeric, or NULL when it does not read as a decimal number: `>` / `<` tag filters compare only
-- tags that are numbers (or strings holding one), and never fail the statement on a tag like "gold".
CREATE FUNCTION pushizo_numeric_or_null(p text) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT CASE WHEN p ~ '^\s*[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$' THEN p::numeric END $$;

-- Counts per notification, computed when read from the append-only events (never a hot-row update per
-- delivery). `targeted` is notifications.targeted_count, kept per chunk. A delivery retried many times has
-- one `retrying` event per attempt; the final events (sent / failed / skipped) appear once per delivery.
CREATE VIEW notification_counts AS
SELECT n.id AS notification_id, n.targeted_count AS targeted,
       count(*) FILTER (WHERE e.event = 'sent') AS sent,
       count(*) FILTER (WHERE e.event = 'failed') AS failed,
       count(*) FILTER (WHERE e.event = 'skipped') AS skipped,
       count(*) FILTER (WHERE e.event = 'deferred') AS deferred
FROM notifications n
LEFT JOIN delivery_events e ON e.notification_id = n.id
GROUP BY n.id, n.targeted_count;
