-- Widens subscriptions.kind to every APNs push type a message can ask for (docs/producer-contract.md,
-- "APNs push types"): besides 'device', 'voip' and 'liveactivity', the token of a Location Push Service
-- Extension ('location', Apple: "Creating a location push service extension"), a Push to Talk channel manager's
-- ephemeral token ('pushtotalk', "Creating a Push to Talk app"), a PushKit complication token ('complication',
-- "Keeping your complications up to date"), a PushKit File Provider token ('fileprovider', "Using push
-- notifications to signal changes"), a device's MDM token ('mdm', "Sending MDM commands to a device") and a
-- WidgetKit push token ('widgets', "Updating widgets with WidgetKit push notifications"). A message with
-- apns_push_type X expands only to 'X' subscriptions, as before.
--
-- Locks: dropping and adding a CHECK constraint takes ACCESS EXCLUSIVE on subscriptions for a moment; the new
-- constraint is NOT VALID, so nothing is scanned (every existing row holds one of the old kinds, all still
-- allowed). The previous release writes only old kinds, which stay valid.
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_kind_known;
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_kind_known
    CHECK (kind IN ('device', 'voip', 'liveactivity', 'location', 'pushtotalk', 'complication', 'fileprovider', 'mdm', 'widgets'))
    NOT VALID;
