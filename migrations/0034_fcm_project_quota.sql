-- FCM project quotas as fleet-wide token buckets (docs/fcm.md, "Project quota"; docs/throttle.md, "FCM project
-- quota").
--
-- Firebase ("Throttling and quotas") gives each Firebase project a quota of messages per minute for HTTP v1 sends
-- (600,000 by default; minutes not aligned to the clock), and answers 429 QUOTA_EXCEEDED over it until it refills.
-- Apps whose FCM channels name the same project_id share it. One bucket row per project, charged once per FCM batch
-- by pushizo_fcm_project_charge(): the worker sends only what the bucket granted and puts the rest back unsent.
--
-- The bucket holds at most quota / 61 permits and refills quota / 61 a second, so any 60 seconds grant at most
-- quota / 61 + 60 × quota / 61 = quota: the fleet never goes over the project's quota in any minute, however the
-- provider's minutes fall. The quota is the channel setting `project_quota_per_minute` (a whole number from 1 to
-- 1,000,000,000; absent or anything else: Firebase's default, 600,000); when the apps sharing a project set
-- different ones, the smallest wins, read from app_channels at each charge, so the fleet always agrees.
--
-- Only added: a new table, functions and an index on app_channels (small: one row per app and provider); a
-- previous release never charges and sends as before. Locks: the index build holds a SHARE lock on app_channels
-- for its few milliseconds.

-- The project an fcm channel's settings name: `project_id` of the service account, nested under `service_account`
-- or at the top level (FCMChannelSettings). NULL when there is none; never an error, whatever the JSON holds.
CREATE FUNCTION pushizo_fcm_channel_project(p_settings jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_settings ? 'service_account' THEN p_settings -> 'service_account' ->> 'project_id'
                ELSE p_settings ->> 'project_id' END
$$;

-- The channel's `project_quota_per_minute` when it is a whole number of 1 ... 1e9, else NULL (the default applies).
-- Nested CASEs: the cast is evaluated only for a JSON number.
CREATE FUNCTION pushizo_fcm_channel_quota(p_settings jsonb) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(p_settings -> 'project_quota_per_minute') = 'number' THEN
                CASE WHEN (p_settings -> 'project_quota_per_minute')::numeric BETWEEN 1 AND 1000000000
                      AND (p_settings -> 'project_quota_per_minute')::numeric
                          = trunc((p_settings -> 'project_quota_per_minute')::numeric)
                     THEN (p_settings -> 'project_quota_per_minute')::numeric END
           END
$$;

-- A charge finds the channels of its project without reading the others.
CREATE INDEX app_channels_fcm_project ON app_channels (pushizo_fcm_channel_project(settings)) WHERE provider = 'fcm';

-- tokens as of refilled_at (the database's clock); per_minute is the quota the last charge applied (for status);
-- held_at is the last charge that granted less than it was asked, held_deliveries how many it and the others held.
CREATE TABLE fcm_project_buckets (
    project_id      text PRIMARY KEY,
    per_minute      numeric NOT NULL,
    tokens          numeric NOT NULL,
    refilled_at     timestamptz NOT NULL,
    held_at         timestamptz,
    held_deliveries bigint NOT NULL DEFAULT 0
);

-- Charges each project of p_projects for p_asked[i] sends at p_at (NULL: clock_timestamp(), one clock for the
-- fleet; tests pass instants of their own). Projects are locked in name order, so two charges never deadlock; each
-- charge holds its rows only for the statement. Returns, per project: the quota applied, the permits granted (at
-- most the asked, at most the whole permits held), the permits left, the refill per second and the instant of the
-- charge, from which the worker dates the next permit of each send it holds back.
CREATE FUNCTION pushizo_fcm_project_charge(p_projects text[], p_asked integer[], p_at timestamptz DEFAULT NULL)
    RETURNS TABLE (project text, quota_per_minute numeric, granted integer, permits_left numeric, per_second numeric,
                   charged_at timestamptz)
    LANGUAGE plpgsql AS $$
DECLARE
    ask record;
    bucket record;
    quota numeric;
    capacity numeric;
    available numeric;
BEGIN
    FOR ask IN
        SELECT a.p AS project_id, sum(greatest(a.n, 0))::integer AS asked
        FROM unnest(p_projects, p_asked) AS a(p, n)
        WHERE a.p IS NOT NULL
        GROUP BY a.p ORDER BY a.p
    LOOP
        quota := coalesce((SELECT min(pushizo_fcm_channel_quota(ch.settings)) FROM app_channels ch
                           WHERE ch.provider = 'fcm' AND pushizo_fcm_channel_project(ch.settings) = ask.project_id),
                          600000);
        capacity := quota / 61;
        charged_at := coalesce(p_at, clock_timestamp());
        INSERT INTO fcm_project_buckets (project_id, per_minute, tokens, refilled_at)
        VALUES (ask.project_id, quota, capacity, charged_at)
        ON CONFLICT (project_id) DO NOTHING;
        SELECT b.tokens, b.refilled_at INTO bucket
        FROM fcm_project_buckets b WHERE b.project_id = ask.project_id FOR UPDATE;
        -- Read again after the lock: the instant must not come before the refill another charge just wrote.
        charged_at := greatest(coalesce(p_at, clock_timestamp()), bucket.refilled_at);
        available := least(capacity,
                           bucket.tokens + capacity * extract(epoch FROM charged_at - bucket.refilled_at)::numeric);
        granted := least(ask.asked, floor(available))::integer;
        permits_left := available - granted;
        UPDATE fcm_project_buckets b
        SET per_minute = quota, tokens = permits_left, refilled_at = charged_at,
            held_at = CASE WHEN granted < ask.asked THEN charged_at ELSE b.held_at END,
            held_deliveries = b.held_deliveries + (ask.asked - granted)
        WHERE b.project_id = ask.project_id;
        project := ask.project_id;
        quota_per_minute := quota;
        per_second := capacity;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- pushizo_apply_roles() of 0033 keeps its grants under a name of its own; the function of that name now runs it and
-- grants this migration's table (pushizo_set_producer_row_security() calls it by name).
ALTER FUNCTION pushizo_apply_roles() RENAME TO pushizo_apply_roles_0033;

DO $do$
DECLARE
    q constant text := quote_ident(current_schema());
BEGIN
    EXECUTE replace($fn$
        CREATE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            PERFORM @s@.pushizo_apply_roles_0033();
            -- Workers charge the buckets; status reads them.
            IF to_regrole('pushizo_worker') IS NOT NULL THEN
                GRANT SELECT, INSERT, UPDATE, DELETE ON @s@.fcm_project_buckets TO pushizo_worker;
            END IF;
            IF to_regrole('pushizo_reader') IS NOT NULL THEN
                GRANT SELECT ON @s@.fcm_project_buckets TO pushizo_reader;
            END IF;
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_apply_roles_0033() FROM PUBLIC;

SELECT pushizo_apply_roles();
