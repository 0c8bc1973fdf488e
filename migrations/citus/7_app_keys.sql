-- Step 7 of `pushizo-worker distribute` (docs/scale-out.md, "The distribute step"): the foreign keys to `apps` that
-- step 2 dropped, added again now that `apps` is a reference table (from a distributed or reference table to a
-- reference table, Citus adds and checks a foreign key shard by shard), and the channel sends' key to their
-- notification that step 2 dropped. Skipped once they are all there.
ALTER TABLE app_channels ADD CONSTRAINT app_channels_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
ALTER TABLE app_producers ADD CONSTRAINT app_producers_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
ALTER TABLE app_claim_turns ADD CONSTRAINT app_claim_turns_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
ALTER TABLE app_send_buckets ADD CONSTRAINT app_send_buckets_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
ALTER TABLE frequency_cap_grants ADD CONSTRAINT frequency_cap_grants_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
ALTER TABLE notifications ADD CONSTRAINT notifications_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
ALTER TABLE users ADD CONSTRAINT users_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
ALTER TABLE live_activity_channels ADD CONSTRAINT live_activity_channels_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id) ON DELETE CASCADE;
-- Between colocated tables on their distribution column (docs/scale-out.md, "Keys and constraints").
ALTER TABLE live_activity_channel_sends ADD CONSTRAINT live_activity_channel_sends_notification_id_fkey
    FOREIGN KEY (notification_id) REFERENCES notifications (id) ON DELETE CASCADE;
