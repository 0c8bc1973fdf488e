-- Step 2 of `pushizo-worker distribute` (docs/scale-out.md, "Keys and constraints"): every primary key and unique
-- constraint of a lane table includes `lane`; the foreign keys between tables of different colocation groups go,
-- and so, until step 7, does every foreign key to `apps` (once `apps` is a reference table, a local table
-- referencing it would become a Citus local table, which an identity column then keeps from being distributed).
-- Skipped once `deliveries_pkey` is (lane, id).
--
-- Lookups by id alone keep an index of their own (a subscription or delivery read by id across lanes).
ALTER TABLE subscriptions DROP CONSTRAINT IF EXISTS subscriptions_user_id_fkey;
ALTER TABLE expansion_slices DROP CONSTRAINT IF EXISTS expansion_slices_notification_id_fkey;
ALTER TABLE delivery_pages DROP CONSTRAINT IF EXISTS delivery_pages_notification_id_fkey;
ALTER TABLE app_channels DROP CONSTRAINT IF EXISTS app_channels_app_id_fkey;
ALTER TABLE app_claim_turns DROP CONSTRAINT IF EXISTS app_claim_turns_app_id_fkey;
ALTER TABLE app_producers DROP CONSTRAINT IF EXISTS app_producers_app_id_fkey;
ALTER TABLE app_send_buckets DROP CONSTRAINT IF EXISTS app_send_buckets_app_id_fkey;
ALTER TABLE frequency_cap_grants DROP CONSTRAINT IF EXISTS frequency_cap_grants_app_id_fkey;
ALTER TABLE notifications DROP CONSTRAINT IF EXISTS notifications_app_id_fkey;
ALTER TABLE subscriptions DROP CONSTRAINT IF EXISTS subscriptions_app_id_fkey;
ALTER TABLE users DROP CONSTRAINT IF EXISTS users_app_id_fkey;
ALTER TABLE live_activity_channels DROP CONSTRAINT IF EXISTS live_activity_channels_app_id_fkey;
-- Colocated with notifications once distributed, but until then a local table whose key would keep the
-- notifications' local rows from being truncated after their copy: added again in step 7.
ALTER TABLE live_activity_channel_sends DROP CONSTRAINT IF EXISTS live_activity_channel_sends_notification_id_fkey;
CREATE INDEX IF NOT EXISTS subscriptions_id ON subscriptions (id);
ALTER TABLE subscriptions DROP CONSTRAINT IF EXISTS subscriptions_pkey;
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_pkey PRIMARY KEY (lane, id);
CREATE INDEX IF NOT EXISTS deliveries_id ON deliveries (id);
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_once_per_subscription;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_once_per_subscription UNIQUE (lane, notification_id, subscription_id);
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_pkey;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_pkey PRIMARY KEY (lane, id);
ALTER TABLE delivery_pages DROP CONSTRAINT IF EXISTS delivery_pages_pkey;
ALTER TABLE delivery_pages ADD CONSTRAINT delivery_pages_pkey PRIMARY KEY (lane, id);
ALTER TABLE delivery_events DROP CONSTRAINT IF EXISTS delivery_events_pkey;
ALTER TABLE delivery_events ADD CONSTRAINT delivery_events_pkey PRIMARY KEY (lane, id, at);
ALTER TABLE expansion_slices DROP CONSTRAINT IF EXISTS expansion_slices_pkey;
ALTER TABLE expansion_slices ADD CONSTRAINT expansion_slices_pkey PRIMARY KEY (lane, notification_id, slice);
ALTER TABLE app_claim_turns DROP CONSTRAINT IF EXISTS app_claim_turns_pkey;
ALTER TABLE app_claim_turns ADD CONSTRAINT app_claim_turns_pkey PRIMARY KEY (lane, app_id);
-- users are distributed by id: (app_id, external_id) stays an index for the lookups, no longer unique
-- (docs/scale-out.md, "Open questions").
CREATE INDEX IF NOT EXISTS users_external_id ON users (app_id, external_id);
ALTER TABLE users DROP CONSTRAINT IF EXISTS users_external_id_unique;
-- The producers' idempotency index is unique without `id`, which Citus refuses on a table distributed by `id`; the
-- lookups keep an index, no longer unique, and a producer's `ON CONFLICT (app_id, idempotency_key)` is refused
-- (docs/scale-out.md, "Limits").
CREATE INDEX IF NOT EXISTS notifications_idempotency_key_lookup ON notifications (app_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS notifications_idempotency_key;
