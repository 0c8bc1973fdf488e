-- The floor's input (scripts/bench/event-floor.pgbench): the events of the deliveries that the notifications'
-- listed subscriptions make, in batches of :batch rows, one row per batch with its columns as arrays (the
-- worker hands its completion's columns over as arrays), an APNs `sent` event's detail each; and the sequence
-- the script takes batch numbers from. Each notification's subscriptions in list order, as its claims take them.
-- Run by scripts/bench.sh as `psql -v batch=N -f`, before its clock starts; delivery_events is emptied.
SET client_min_messages = warning;
TRUNCATE delivery_events;
DROP TABLE IF EXISTS event_floor_batches;
DROP SEQUENCE IF EXISTS event_floor_batch;
CREATE SEQUENCE event_floor_batch;
CREATE TABLE event_floor_batches AS
SELECT k / :batch + 1 AS batch, array_agg(app_id ORDER BY k) AS app_ids,
       array_agg(notification_id ORDER BY k) AS notification_ids, array_agg(subscription_id ORDER BY k) AS subscription_ids,
       array_agg('sent'::text ORDER BY k) AS events, array_agg(NULL::text ORDER BY k) AS reasons,
       array_agg(1 ORDER BY k) AS attempts,
       array_agg(json_build_object('provider_message_id', apns_id, 'apns_id', apns_id, 'provider', 'apns')::text ORDER BY k) AS details
FROM (SELECT row_number() OVER (ORDER BY n.id, t.position) - 1 AS k, n.app_id, n.id AS notification_id,
             t.sid::uuid AS subscription_id, gen_random_uuid() AS apns_id
      FROM notifications n
      CROSS JOIN LATERAL jsonb_array_elements_text(n.target->'include_subscription_ids') WITH ORDINALITY t(sid, position)) r
GROUP BY k / :batch;
ALTER TABLE event_floor_batches ADD PRIMARY KEY (batch);
VACUUM ANALYZE event_floor_batches;
