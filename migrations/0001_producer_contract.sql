-- The producer contract of DESIGN.md §3: tables and columns producers, operators and outside tests rely on.
-- Pinned names stay as they are; columns added here beyond them are the worker's own.

CREATE TABLE apps (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name              text NOT NULL DEFAULT '',
    default_language  text NOT NULL DEFAULT 'en',
    default_timezone  text NOT NULL DEFAULT 'UTC',
    -- Local wall-clock window; both NULL = quiet hours off. start > end wraps midnight.
    quiet_hours_start time,
    quiet_hours_end   time,
    -- [{"max": 3, "per_seconds": 86400}, ...]; every rule must hold.
    frequency_caps    jsonb NOT NULL DEFAULT '[]',
    -- HMAC-SHA256 key for the signed msgId. The default draws 244 bits from PostgreSQL's strong random source.
    signing_key       bytea NOT NULL DEFAULT (uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT apps_quiet_hours_both_or_neither
        CHECK ((quiet_hours_start IS NULL) = (quiet_hours_end IS NULL)),
    CONSTRAINT apps_frequency_caps_is_array CHECK (jsonb_typeof(frequency_caps) = 'array')
);

CREATE TABLE app_channels (
    app_id        uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    provider      text NOT NULL CHECK (provider IN ('apns', 'fcm', 'webpush')),
    -- Provider credentials, e.g. APNs: {"team_id","key_id","private_key" (PKCS#8 PEM),"topic"}.
    settings      jsonb NOT NULL DEFAULT '{}',
    -- Base-URL override (the emulator, a proxy); NULL = the provider's real endpoint.
    endpoint      text,
    -- A credential error pauses the channel (not its subscribers) until this instant.
    paused_until  timestamptz,
    paused_reason text,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, provider)
);

CREATE TABLE users (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id      uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    external_id text,
    tags        jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_external_id_unique UNIQUE (app_id, external_id)
);

CREATE TABLE subscriptions (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id           uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    user_id          uuid REFERENCES users (id) ON DELETE SET NULL,
    -- 'ios' | 'android' | 'web'. Deliberately unconstrained: an unknown platform fails that one delivery.
    platform         text NOT NULL,
    -- APNs hex device token, FCM registration token, or Web Push endpoint URL.
    token            text NOT NULL,
    apns_environment text CHECK (apns_environment IN ('production', 'sandbox')),
    web_p256dh       text,
    web_auth         text,
    language         text,
    timezone         text,
    country          text,
    status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'unsubscribed', 'invalid')),
    invalid_reason   text,
    token_updated_at timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscriptions_user ON subscriptions (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX subscriptions_app_active ON subscriptions (app_id, id) WHERE status = 'active';

CREATE TABLE notifications (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    app_id          uuid NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    campaign_id     text,
    -- The seed's message fields: headings, contents, ios_sound, thread_id, ttl, priority, ...
    message         jsonb NOT NULL,
    -- {"include_subscription_ids": [...]} | {"include_external_ids": [...]} | {"filters": [...]} | {"all": true}
    target          jsonb NOT NULL,
    send_after      timestamptz,
    -- Producers write 'pending' (the default) or 'canceled'; the worker moves it through
    -- 'expanding' to 'expanded', or to 'failed' with status_reason.
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'expanding', 'expanded', 'canceled', 'failed')),
    status_reason   text,
    targeted_count  integer,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expanded_at     timestamptz
);
CREATE INDEX notifications_to_expand ON notifications (send_after NULLS FIRST, created_at)
    WHERE status IN ('pending', 'expanding');

-- The hot queue: one row per (notification, subscription) until it reaches a terminal event, then deleted.
-- run_at doubles as the lease: a claim pushes it to the lease's expiry, so a delivery whose worker died is
-- claimable again once the lease runs out, by the same query that claims fresh work.
CREATE TABLE deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id uuid NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    subscription_id uuid NOT NULL REFERENCES subscriptions (id) ON DELETE CASCADE,
    app_id          uuid NOT NULL,
    -- Stable per delivery, the same on every retry: APNs's apns-id, so a duplicate send is recognisable.
    apns_id         uuid NOT NULL DEFAULT gen_random_uuid(),
    -- Claimed highest first: 10 for priority high, 5 for normal.
    priority        smallint NOT NULL DEFAULT 5,
    run_at          timestamptz NOT NULL DEFAULT now(),
    -- Number of claims so far (a send attempt each).
    attempt         integer NOT NULL DEFAULT 0,
    -- Fencing token: bumped by every claim; a completion names the fence it was claimed with and is
    -- ignored when the row was claimed again since (a late worker cannot overwrite a rescued delivery).
    fence           bigint NOT NULL DEFAULT 0,
    leased_by       text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT deliveries_once_per_subscription UNIQUE (notification_id, subscription_id)
);
CREATE INDEX deliveries_claim_order ON deliveries (priority DESC, run_at);
CREATE INDEX deliveries_subscription ON deliveries (subscription_id);

-- Append-only outcomes. Worker-written events: sent, failed, retrying, deferred, skipped.
CREATE TABLE delivery_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    app_id          uuid NOT NULL,
    notification_id uuid NOT NULL,
    subscription_id uuid,
    event           text NOT NULL,
    reason          text,
    attempt         integer NOT NULL DEFAULT 0,
    detail          jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX delivery_events_notification ON delivery_events (notification_id, subscription_id);
CREATE INDEX delivery_events_subscription_at ON delivery_events (subscription_id, at);

-- Wake-up hints for idle workers: one NOTIFY per statement, never per row (and PostgreSQL folds identical
-- notifications within a transaction). Workers poll as a floor, so a lost hint only delays.
CREATE FUNCTION pushizo_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pushizo_wakeup', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;
CREATE TRIGGER notifications_wake AFTER INSERT OR UPDATE OF status, send_after ON notifications
    FOR EACH STATEMENT EXECUTE FUNCTION pushizo_wake();
CREATE TRIGGER deliveries_wake AFTER INSERT ON deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION pushizo_wake();
