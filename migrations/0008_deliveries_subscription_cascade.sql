-- Expansion's cost per delivery (docs/performance.md, "Expansion and the deliveries schema"): the foreign key
-- deliveries.subscription_id -> subscriptions was the costliest part of inserting a delivery. Its check takes a
-- FOR KEY SHARE lock on the subscription row of every inserted delivery, which rewrites that row's header (a
-- broadcast to a million devices dirtied a million subscription rows). What it gave, deleting a subscription
-- deletes its queued deliveries, is kept by one statement-level trigger; the index deliveries_subscription
-- serves it. A delivery inserted while its subscription is being deleted (the one race the key used to close)
-- is claimed with subscription status 'deleted' and skipped (subscription_inactive); see docs/targets.md.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_subscription_id_fkey;

CREATE FUNCTION pushizo_subscriptions_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM deliveries d USING gone WHERE d.subscription_id = gone.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER subscriptions_deleted AFTER DELETE ON subscriptions
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pushizo_subscriptions_deleted();
