-- Per-app send-rate throttle, held across the whole fleet (docs/throttle.md).
--
-- apps.max_sends_per_second (NULL = unlimited) is refilled into one token-bucket row per limited app; the claim
-- statement takes permits from it in its own transaction and claims at most that many of the app's deliveries.
-- A limited app's queued deliveries carry deliveries.throttled, so the claim reaches them through their own
-- per-app index and reaches everybody else's through an index that does not contain them: a limited app's
-- backlog of any length, due at the head of the priority order, is never scanned by a claim.

ALTER TABLE apps ADD COLUMN max_sends_per_second double precision
    CONSTRAINT apps_max_sends_per_second_positive
        CHECK (max_sends_per_second > 0 AND max_sends_per_second < 'infinity');

-- Set by the triggers below, never by the worker's inserts: true while the delivery's app has a limit.
ALTER TABLE deliveries ADD COLUMN throttled boolean NOT NULL DEFAULT false;

-- The bucket's capacity (the burst): a tenth of a second's sends, at least one permit.
CREATE FUNCTION pushizo_send_burst(p_rate double precision) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT greatest(1.0, p_rate * 0.1) $$;

-- The permits a bucket holds at p_at: its tokens as of p_refilled_at plus p_rate per second since, capped at
-- the burst. One definition for the claim, the claim loop's wait and `status`.
CREATE FUNCTION pushizo_bucket_permits(
    p_rate double precision, p_tokens double precision, p_refilled_at timestamptz, p_at timestamptz
) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(pushizo_send_burst(p_rate),
                 p_tokens + p_rate * greatest(0, extract(epoch FROM p_at - p_refilled_at)::float8))
$$;

-- tokens as of refilled_at (the database's clock_timestamp()); the claim refills by rate * elapsed, capped at
-- the burst. Written only by claims that took permits (and created full when the limit is set).
CREATE TABLE app_send_buckets (
    app_id      uuid PRIMARY KEY REFERENCES apps (id) ON DELETE CASCADE,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Built inside the migration's transaction (not CONCURRENTLY): on a large queue, run it while claims are idle.
CREATE INDEX deliveries_claim_unthrottled ON deliveries (priority DESC, run_at) WHERE NOT throttled;
CREATE INDEX deliveries_claim_throttled ON deliveries (app_id, priority DESC, run_at) WHERE throttled;

-- New deliveries of a limited app are flagged in the inserting statement (one UPDATE per statement, a no-op
-- join when no app has a limit), so no transaction ever sees them unflagged.
CREATE FUNCTION pushizo_flag_throttled_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM apps WHERE max_sends_per_second IS NOT NULL) THEN
        UPDATE deliveries d SET throttled = true
        FROM new_deliveries n JOIN apps a ON a.id = n.app_id
        WHERE d.id = n.id AND a.max_sends_per_second IS NOT NULL AND NOT d.throttled;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER deliveries_throttle_flag AFTER INSERT ON deliveries
    REFERENCING NEW TABLE AS new_deliveries FOR EACH STATEMENT EXECUTE FUNCTION pushizo_flag_throttled_deliveries();

-- Setting a limit creates the app's bucket (full) and flags its queued deliveries; clearing it unflags them and
-- drops the bucket. Either rewrites that app's queued rows once, in the operator's statement. Runs as its owner
-- so that a role allowed to edit apps needs no rights on the queue.
CREATE FUNCTION pushizo_app_throttle_changed() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF NEW.max_sends_per_second IS NOT NULL THEN
        INSERT INTO app_send_buckets (app_id, tokens)
        VALUES (NEW.id, pushizo_send_burst(NEW.max_sends_per_second))
        ON CONFLICT (app_id) DO NOTHING;
    ELSE
        DELETE FROM app_send_buckets WHERE app_id = NEW.id;
    END IF;
    IF TG_OP = 'UPDATE' AND (OLD.max_sends_per_second IS NULL) <> (NEW.max_sends_per_second IS NULL) THEN
        UPDATE deliveries SET throttled = (NEW.max_sends_per_second IS NOT NULL)
        WHERE app_id = NEW.id AND throttled = (NEW.max_sends_per_second IS NULL);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER apps_throttle_changed AFTER INSERT OR UPDATE OF max_sends_per_second ON apps
    FOR EACH ROW EXECUTE FUNCTION pushizo_app_throttle_changed();

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION pushizo_app_throttle_changed() SET search_path = %I, pg_temp', current_schema());
END;
$$;
