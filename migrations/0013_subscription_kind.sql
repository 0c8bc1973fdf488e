-- What kind of APNs token a subscription holds, so a push goes only to the token made for it.
--
-- An iOS app has up to three kinds of push token: the device token of UIKit's registerForRemoteNotifications
-- ('device': alert and background pushes, and every Android and web subscription), the PushKit VoIP token
-- ('voip': apns-push-type voip, Apple: "Responding to VoIP notifications from PushKit"), and an ActivityKit
-- token ('liveactivity': a push-to-start token or one Live Activity's update token, Apple: "Starting and
-- updating Live Activities with ActivityKit push notifications"). A message with apns_push_type voip expands
-- only to 'voip' subscriptions, liveactivity only to 'liveactivity' ones, every other message only to
-- 'device' ones: iOS terminates an app that receives a VoIP push without reporting a call to CallKit, so an
-- ordinary alert must never reach a VoIP token (docs/producer-contract.md).
--
-- Existing rows are device tokens: the constant default is stored in the catalog, so adding the column
-- rewrites nothing, and the constraint is NOT VALID so that adding it scans nothing either (every existing row
-- holds the default; new and updated rows are checked).
ALTER TABLE subscriptions ADD COLUMN kind text NOT NULL DEFAULT 'device';
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_kind_known
    CHECK (kind IN ('device', 'voip', 'liveactivity')) NOT VALID;

-- A row's kind is fixed: expansion chose its deliveries by kind, so a row turned from 'device' into 'voip' would
-- let a queued alert reach a VoIP token. A token of another kind is a new subscription row. The trigger fires
-- only for statements that set the column (UPDATE OF kind), so ordinary updates pay nothing.
CREATE FUNCTION pushizo_subscription_kind_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind IS DISTINCT FROM OLD.kind THEN
        RAISE EXCEPTION 'subscriptions.kind cannot change (from % to %): register a token of another kind as a new subscription',
            OLD.kind, NEW.kind USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER subscriptions_kind_fixed BEFORE UPDATE OF kind ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION pushizo_subscription_kind_fixed();
