-- The expand loop's chunk step picks the next notification that is not small (the bulk pass takes the small
-- ones: pending, never touched by expansion, an id list of at most 8 KiB; QueueStore.smallNotificationPredicate).
-- Through notifications_to_expand it walked past every pending small notification first (they sort first:
-- never touched), so under a steady stream of one-device notifications each pick read the whole small backlog,
-- 2,000 index and heap entries a pick at 5,000 notifications/s, and more the further expansion fell behind.
-- This index holds only what that pick can take. Its predicate is the pick's own clauses, word for word, so the
-- planner can use it (ExpansionTests checks the rows the pick reads); change both together.
CREATE INDEX notifications_to_expand_large ON notifications (expansion_touched_at NULLS FIRST, created_at)
    WHERE status IN ('pending', 'expanding')
      AND NOT (status = 'pending' AND expansion_touched_at IS NULL AND expansion_cursor IS NULL
               AND (target ? 'include_subscription_ids' OR target ? 'include_external_ids')
               AND octet_length(target::text) <= 8192);
