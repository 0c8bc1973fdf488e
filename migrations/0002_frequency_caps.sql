-- Frequency caps (issue 4 items 5-7, docs/frequency-caps.md): one row per notification granted to a cap key
-- (the subscription's user, else the subscription itself). A grant is what the caps count, and what lets every
-- device of the key receive that notification once it is granted. Exact across workers and hosts: reservations
-- and releases for one (app, key) are serialized by a transaction-scoped advisory lock on its hash.
CREATE TABLE frequency_cap_grants (
    app_id          uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    -- users.id, or subscriptions.id for a subscription without a user.
    cap_key         uuid NOT NULL,
    -- No foreign key: deleting old notifications must not give users their quota back early.
    notification_id uuid NOT NULL,
    -- clock_timestamp() taken after the key's lock, so grants of one key are ordered as they were granted.
    granted_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (app_id, cap_key, notification_id)
);
-- The window counts: grants of one key since an instant.
CREATE INDEX frequency_cap_grants_window ON frequency_cap_grants (app_id, cap_key, granted_at);

-- The advisory-lock key of (app, cap key): a 64-bit hash. A collision only serializes two keys needlessly.
CREATE FUNCTION pushizo_frequency_cap_lock_key(p_app uuid, p_key uuid) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT hashtextextended('pushizo-frequency-cap/' || p_app::text || '/' || p_key::text, 0) $$;

-- Reserves `p_notification` for (p_app, p_key) under caps given as parallel arrays (max[i] per per_seconds[i]).
-- One call is one short transaction (the lock is released at its end; no row lock outlives it). Returns
-- granted = true when a grant exists for this notification already (reused = true) or every rule had room
-- (a grant is inserted); otherwise granted = false and the first full rule with its count. Grants of this key
-- older than p_keep_seconds are pruned on the way (they can no longer deny anything).
-- Each statement in a VOLATILE plpgsql function takes a fresh snapshot (READ COMMITTED), so the counts below
-- see every grant committed before this call got the lock.
CREATE FUNCTION pushizo_reserve_frequency_cap(
    p_app uuid, p_key uuid, p_notification uuid, p_max integer[], p_per_seconds integer[], p_keep_seconds integer,
    OUT granted boolean, OUT reused boolean, OUT rule_index integer, OUT used bigint)
    LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(pushizo_frequency_cap_lock_key(p_app, p_key));
    v_now := clock_timestamp();
    granted := true;
    reused := true;
    rule_index := NULL;
    used := NULL;
    IF EXISTS (SELECT 1 FROM frequency_cap_grants
               WHERE app_id = p_app AND cap_key = p_key AND notification_id = p_notification) THEN
        RETURN;
    END IF;
    reused := false;
    DELETE FROM frequency_cap_grants
    WHERE app_id = p_app AND cap_key = p_key AND granted_at < v_now - make_interval(secs => p_keep_seconds);
    FOR i IN 1 .. coalesce(array_length(p_max, 1), 0) LOOP
        SELECT count(*) INTO used FROM frequency_cap_grants
        WHERE app_id = p_app AND cap_key = p_key AND granted_at > v_now - make_interval(secs => p_per_seconds[i]);
        IF used >= p_max[i] THEN
            granted := false;
            rule_index := i - 1;
            RETURN;
        END IF;
    END LOOP;
    used := NULL;
    INSERT INTO frequency_cap_grants (app_id, cap_key, notification_id, granted_at)
    VALUES (p_app, p_key, p_notification, v_now);
END;
$$;
