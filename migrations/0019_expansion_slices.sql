-- A broadcast expanded by several backends at once (docs/targets.md, "Slices"). One backend inserts deliveries
-- at about 15 µs a row, so a million subscriptions took 17-20 s whatever the cores: one notification was
-- expanded one chunk at a time, each chunk holding the notification row FOR UPDATE. Now, once a broadcast's
-- first chunk finds more than a slice of subscriptions after it, the rest of the app's id range is cut into
-- slices of about `QueueStore.Slicing.default.size` (50,000) subscriptions, each with its own keyset cursor; different
-- slices of one notification are expanded at the same time by different expand tasks and workers, each chunk
-- locking its slice row, not the notification row.

-- Worker-written, like expansion_cursor: true once the notification's remaining audience is in expansion_slices.
-- The chunk step's pick leaves such notifications to the slice pick.
ALTER TABLE notifications ADD COLUMN expansion_sliced boolean NOT NULL DEFAULT false;

-- One row per slice left to do: a slice's row is deleted by the chunk that finishes it (or by the pick, once its
-- notification is canceled or failed), so the table holds only open slices and the pick reads nothing else.
CREATE TABLE expansion_slices (
    notification_id uuid NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    -- 0, 1, ... in id order.
    slice           integer NOT NULL,
    -- Keyset cursor: the last subscriptions.id this slice has looked at (exclusive lower bound of what is left).
    slice_after     uuid NOT NULL,
    -- Inclusive upper bound of the slice's ids; NULL for the last slice (no bound).
    slice_upto      uuid,
    PRIMARY KEY (notification_id, slice)
);

-- The chunk step's pick (QueueStore.chunkPickSQL(.skippingSmall)) now also skips sliced notifications: its
-- index is rebuilt with that clause, word for word as the statement says it.
DROP INDEX notifications_to_expand_large;
CREATE INDEX notifications_to_expand_large ON notifications (expansion_touched_at NULLS FIRST, created_at)
    WHERE status IN ('pending', 'expanding') AND NOT scheduled AND NOT expansion_sliced
      AND NOT (status = 'pending' AND expansion_touched_at IS NULL AND expansion_cursor IS NULL
               AND (target ? 'include_subscription_ids' OR target ? 'include_external_ids')
               AND octet_length(target::text) <= 8192);
