-- Local-time delivery (docs/local-time-delivery.md): a message's `delivery_time_of_day` ("HH:MM") makes each
-- subscriber's delivery due at the next such local wall-clock time at or after the notification's start, in
-- the subscriber's zone. Expansion computes the due instants here, in bulk, once per distinct zone of a chunk
-- (never per row, never a round trip per row); the Swift rule (`LocalTimeDelivery` in DeliveryCore) mirrors
-- these functions step by step, and tests hold the two to the same answers.

-- The instant a local-time delivery was scheduled for (NULL: not scheduled by local time). run_at is set to it
-- at expansion; the claim reads it so that a delivery whose notification expires before it is skipped.
ALTER TABLE deliveries ADD COLUMN local_due_at timestamptz;
-- The `scheduled` count of notification_counts: one range of this index per notification.
CREATE INDEX deliveries_local_due ON deliveries (notification_id, local_due_at) INCLUDE (run_at)
    WHERE local_due_at IS NOT NULL;

-- The zone's UTC offset in seconds at an instant (seconds since 1970), from PostgreSQL's tz database.
CREATE FUNCTION pushizo_zone_offset(p_instant bigint, p_zone text) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT extract(epoch FROM to_timestamp(p_instant) AT TIME ZONE p_zone)::bigint - p_instant
$$;

-- The earliest instant after p_after whose wall clock in p_zone reads p_target (local seconds: the reading
-- written as if it were UTC), exactly as WallClock.firstInstant(ofLocal:after:) in Swift: the offsets the zone
-- uses within two days either side are the candidates; a reading that exists twice gives its first
-- occurrence after p_after; one that does not exist (a gap) gives the first valid instant after the gap, found
-- by bisection (at most 19 steps). NULL when there is none after p_after.
CREATE FUNCTION pushizo_first_local_instant(p_target bigint, p_after bigint, p_zone text) RETURNS bigint
    LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    v_hours   integer;
    v_offset  bigint;
    v_offsets bigint[] := '{}';
    v_found   boolean := false;
    v_best    bigint;
    v_low     bigint := p_target - 172800;
    v_high    bigint := p_target + 172800;
    v_middle  bigint;
BEGIN
    FOREACH v_hours IN ARRAY ARRAY[-48, -36, -24, -12, 0, 12, 24, 36, 48] LOOP
        v_offset := pushizo_zone_offset(p_target + v_hours * 3600, p_zone);
        IF NOT v_offset = ANY (v_offsets) THEN
            v_offsets := v_offsets || v_offset;
        END IF;
    END LOOP;
    FOREACH v_offset IN ARRAY v_offsets LOOP
        IF pushizo_zone_offset(p_target - v_offset, p_zone) = v_offset THEN
            v_found := true;
            IF p_target - v_offset > p_after AND (v_best IS NULL OR p_target - v_offset < v_best) THEN
                v_best := p_target - v_offset;
            END IF;
        END IF;
    END LOOP;
    IF v_found THEN
        RETURN v_best;
    END IF;
    IF v_low + pushizo_zone_offset(v_low, p_zone) >= p_target
       OR v_high + pushizo_zone_offset(v_high, p_zone) < p_target THEN
        RETURN NULL;
    END IF;
    WHILE v_high - v_low > 1 LOOP
        v_middle := v_low + (v_high - v_low) / 2;
        IF v_middle + pushizo_zone_offset(v_middle, p_zone) >= p_target THEN
            v_high := v_middle;
        ELSE
            v_low := v_middle;
        END IF;
    END LOOP;
    RETURN CASE WHEN v_high > p_after THEN v_high END;
END;
$$;

-- When a delivery with delivery_time_of_day p_time_of_day is due in the known zone p_zone for a notification
-- starting at p_start: the first instant at or after p_start whose local wall clock reads it, on the start's
-- local day or the next (LocalTimeDelivery.dueAt(timeOfDay:in:start:) in Swift). NULL when p_start is not
-- finite or more than 9.4e10 s from 1970: no schedule, the delivery is due at once.
CREATE FUNCTION pushizo_local_due(p_start timestamptz, p_time_of_day time, p_zone text) RETURNS timestamptz
    LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    v_first bigint;
    v_day   bigint;
    v_tod   bigint;
    v_due   bigint;
BEGIN
    IF p_start IS NULL OR p_time_of_day IS NULL OR NOT isfinite(p_start)
       OR abs(extract(epoch FROM p_start)) >= 94000000000 THEN
        RETURN NULL;
    END IF;
    -- Whole seconds: the first second at or after the start.
    v_first := ceil(extract(epoch FROM p_start))::bigint;
    v_day := floor((v_first + pushizo_zone_offset(v_first, p_zone))::numeric / 86400)::bigint;
    v_tod := (extract(hour FROM p_time_of_day) * 3600 + extract(minute FROM p_time_of_day) * 60
              + floor(extract(second FROM p_time_of_day)))::bigint;
    v_due := coalesce(pushizo_first_local_instant(v_day * 86400 + v_tod, v_first - 1, p_zone),
                      pushizo_first_local_instant((v_day + 1) * 86400 + v_tod, v_first - 1, p_zone));
    RETURN to_timestamp(v_due);
END;
$$;

-- The names among p_names that PostgreSQL's tz database knows, spelled exactly as given (pg_timezone_names;
-- no case folding, no abbreviations or POSIX specs such as 'UTC+5'), as quiet hours accept names exactly as
-- stored. One read of the tz database per call, so a statement calls it once for all its names.
CREATE FUNCTION pushizo_known_zones(p_names text[]) RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(z.name), '{}') FROM pg_timezone_names z
    WHERE z.name = ANY (p_names) AND octet_length(z.name) <= 64
$$;

-- The columns and meaning so far, plus `scheduled`: deliveries still waiting for their local time (a
-- local-time schedule not yet reached, not made due early by an expiry). Not an event count: it shrinks as
-- the local times pass (and the deliveries become `sent`, `skipped`, ...), and a canceled notification's
-- scheduled deliveries leave with the cancellation sweep.
CREATE OR REPLACE VIEW notification_counts AS
SELECT n.id AS notification_id, n.targeted_count AS targeted,
       coalesce(c.sent, 0) AS sent, coalesce(c.failed, 0) AS failed,
       coalesce(c.skipped, 0) AS skipped, coalesce(c.deferred, 0) AS deferred,
       (SELECT count(*) FROM deliveries d
        WHERE d.notification_id = n.id AND d.local_due_at IS NOT NULL
          AND d.local_due_at > now() AND d.run_at = d.local_due_at) AS scheduled
FROM notifications n
LEFT JOIN LATERAL (
    SELECT sum(sent)::bigint AS sent, sum(failed)::bigint AS failed,
           sum(skipped)::bigint AS skipped, sum(deferred)::bigint AS deferred
    FROM notification_event_counts c WHERE c.notification_id = n.id
) AS c ON true;
