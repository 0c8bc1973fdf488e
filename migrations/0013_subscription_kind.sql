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
