\echo
\echo notifications
SELECT coalesce(campaign_id, '-') AS campaign, status, coalesce(status_reason, '') AS status_reason, targeted_count
FROM notifications ORDER BY created_at, campaign_id;

\echo final outcome of each delivery (its latest delivery_events row), by platform
WITH latest AS (
    SELECT DISTINCT ON (notification_id, subscription_id) subscription_id, event, reason
    FROM delivery_events ORDER BY notification_id, subscription_id, id DESC
)
SELECT coalesce(s.platform, '-') AS platform, event, coalesce(reason, '') AS reason, count(*)
FROM latest LEFT JOIN subscriptions s ON s.id = latest.subscription_id
GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC;

\echo retries along the way
SELECT event, coalesce(reason, '') AS reason, count(*) FROM delivery_events
WHERE event = 'retrying' GROUP BY 1, 2;

\echo subscriptions
SELECT status, coalesce(invalid_reason, '') AS invalid_reason, count(*) FROM subscriptions GROUP BY 1, 2 ORDER BY 1;

SELECT count(*) AS deliveries_left_in_queue,
       (SELECT count(*) FROM (
            SELECT DISTINCT ON (notification_id, subscription_id) event FROM delivery_events
            ORDER BY notification_id, subscription_id, id DESC) t
        WHERE event IN ('sent', 'failed', 'skipped')) AS deliveries_with_terminal_event
FROM deliveries;
