-- The deliveries insert trigger (pushizo_deliveries_inserted, migration 0015) locks the statement's distinct
-- notifications with `SELECT ... FROM notifications WHERE id = ANY (wanted) FOR KEY SHARE`. PL/pgSQL keeps a
-- generic plan of each statement per session, made from the statistics of the moment: a worker session that
-- first ran it while `notifications` was nearly empty kept a sequential scan (planned at 10 rows), and once
-- producers had inserted tens of thousands of notifications every bulk pass spent 0.5 s in that scan, until an
-- autoanalyze got round to the table (minutes, on a database whose autovacuum workers were busy elsewhere):
-- one-device notifications then arrived in lumps seconds apart (docs/performance.md). Planned on every call
-- instead, each statement sees the array it is given and the table as it is: an index lookup per id. Planning
-- the function's few statements costs well under a millisecond per inserting statement (a bulk pass or a
-- chunk, never a row).
ALTER FUNCTION pushizo_deliveries_inserted() SET plan_cache_mode = force_custom_plan;

-- The same for the cascades that delete deliveries through a transition table: a generic plan made while
-- `deliveries` was small could scan the whole queue on every later delete of subscriptions or notifications.
ALTER FUNCTION pushizo_subscriptions_deleted() SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION pushizo_notifications_deleted() SET plan_cache_mode = force_custom_plan;
