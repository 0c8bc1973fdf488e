-- Fills a migrated throwaway database with a large queue for measuring `pushizo-worker status`
-- (docs/status.md, "Measured"). psql -v rows=1000000 -f scripts/status-fill.sql
-- Shape: 3 apps, one subscription per delivery (ios / android / web by thirds), 4 notifications, and the queue
-- as a busy fleet leaves it: 70% due, about 30% deferred (retries, quiet hours), 5,000 claimed by 8 workers
-- (about 2,000 under a lease, which lasts 2 hours here so that it outlives the fill, the rest expired);
-- delivery_events for the last 30 minutes at rows/10 events (90% sent, 3% failed, 7% retrying).
\set ON_ERROR_STOP on
\if :{?rows}
\else
\set rows 1000000
\endif
SET synchronous_commit = off;
SET maintenance_work_mem = '512MB';
-- Bulk load without indexes (random-UUID keys would make every insert a random index write), rebuilt after.
-- The insert trigger (notification check, throttle flag) is left off: this database only serves measuring.
DROP TRIGGER deliveries_inserted ON deliveries;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_once_per_subscription, DROP CONSTRAINT deliveries_pkey;
DROP INDEX deliveries_claim_unthrottled, deliveries_claim_throttled, deliveries_subscription, deliveries_leased,
    subscriptions_app_active;
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_pkey;
ALTER TABLE delivery_events DROP CONSTRAINT delivery_events_pkey;
DROP INDEX delivery_events_notification, delivery_events_subscription_at;
INSERT INTO apps (id, name) SELECT ('00000000-0000-4000-8000-00000000000' || i)::uuid, 'app' || i FROM generate_series(1, 3) i;
INSERT INTO subscriptions (id, app_id, platform, token)
SELECT gen_random_uuid(), ('00000000-0000-4000-8000-00000000000' || (1 + i % 3))::uuid,
       (ARRAY['ios', 'android', 'web'])[1 + i % 3], 'token-' || i
FROM generate_series(1, :rows) i;
INSERT INTO notifications (id, app_id, message, target, status, targeted_count)
SELECT ('10000000-0000-4000-8000-00000000000' || i)::uuid, ('00000000-0000-4000-8000-00000000000' || (1 + i % 3))::uuid,
       '{"contents": {"en": "hi"}}', '{"all": true}', 'expanded', :rows / 4
FROM generate_series(1, 4) i;
INSERT INTO deliveries (notification_id, subscription_id, app_id, priority, run_at, leased_by, attempt)
SELECT ('10000000-0000-4000-8000-00000000000' || (1 + n % 4))::uuid, s.id, s.app_id,
       CASE WHEN n % 10 = 0 THEN 10 ELSE 5 END,
       CASE WHEN n % 100 < 70 THEN now() - (n % 3600) * interval '1 second'
            WHEN n <= 5000 * 20 AND n % 20 = 19 THEN now() + interval '2 hours' + (n % 60) * interval '1 second'
            ELSE now() + (60 + n % 7200) * interval '1 second' END,
       CASE WHEN n <= 5000 * 20 AND n % 20 = 19 THEN 'host-' || (n / 20 % 8) || ':1234' END,
       n % 3
FROM (SELECT id, app_id, row_number() OVER () AS n FROM subscriptions) s;
INSERT INTO delivery_events (at, app_id, notification_id, subscription_id, event, reason)
SELECT now() - interval '30 minutes' + (i::float8 / (:rows / 10)) * interval '30 minutes',
       '00000000-0000-4000-8000-000000000001', '10000000-0000-4000-8000-000000000001', NULL,
       CASE WHEN i % 100 < 90 THEN 'sent' WHEN i % 100 < 93 THEN 'failed' ELSE 'retrying' END,
       CASE WHEN i % 100 >= 90 THEN 'provider_unavailable' END
FROM generate_series(1, :rows / 10) i;
INSERT INTO app_channels (app_id, provider, paused_until, paused_reason)
VALUES ('00000000-0000-4000-8000-000000000002', 'fcm', now() + interval '4 minutes', 'credentials_refused: invalid_grant');
ALTER TABLE subscriptions ADD PRIMARY KEY (id);
CREATE INDEX subscriptions_app_active ON subscriptions (app_id, id) WHERE status = 'active';
ALTER TABLE deliveries ADD PRIMARY KEY (id),
    ADD CONSTRAINT deliveries_once_per_subscription UNIQUE (notification_id, subscription_id);
CREATE INDEX deliveries_claim_unthrottled ON deliveries (priority DESC, run_at) WHERE NOT throttled;
CREATE INDEX deliveries_claim_throttled ON deliveries (app_id, priority DESC, run_at) WHERE throttled;
CREATE INDEX deliveries_subscription ON deliveries (subscription_id);
CREATE INDEX deliveries_leased ON deliveries (leased_by, run_at) WHERE leased_by IS NOT NULL;
ALTER TABLE delivery_events ADD PRIMARY KEY (id, at);
CREATE INDEX delivery_events_notification ON delivery_events (notification_id, subscription_id);
CREATE INDEX delivery_events_subscription_at ON delivery_events (subscription_id, at);
VACUUM ANALYZE;
