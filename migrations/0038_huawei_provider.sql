-- Huawei Push Kit as a fourth provider (docs/huawei.md): an app's `huawei` channel in app_channels (settings
-- `{"app_id", "client_secret", "client_id"?, "token_uri"?}`), and the fleet's shared Huawei OAuth 2.0 access
-- tokens in provider_tokens (kind 'huawei', one row per client ID + token endpoint, sealed as the others are).
--
-- subscriptions.platform stays unconstrained (0001): a 'huawei' subscription was always accepted; a worker of this
-- release delivers it through the app's huawei channel, where an older one fails it `unknown_platform`.
--
-- Row security and grants: none to add. app_channels' per-app policies and column grants (0027) cover every
-- provider's rows alike, and provider_tokens stays the worker's alone (0007, 0027). No new table, so nothing for
-- the Citus distribute step.
--
-- Locks: dropping and adding a CHECK constraint takes ACCESS EXCLUSIVE on each table for a moment; the new
-- constraints are NOT VALID, so nothing is scanned (every existing row holds one of the old values, all still
-- allowed). Only widened: the previous release writes only the old values, and reads no 'huawei' row (its claim
-- maps no platform to the huawei provider, its token store asks for its own fingerprints only).
ALTER TABLE app_channels DROP CONSTRAINT app_channels_provider_check;
ALTER TABLE app_channels ADD CONSTRAINT app_channels_provider_check
    CHECK (provider IN ('apns', 'fcm', 'webpush', 'huawei')) NOT VALID;

ALTER TABLE provider_tokens DROP CONSTRAINT provider_tokens_kind_check;
ALTER TABLE provider_tokens ADD CONSTRAINT provider_tokens_kind_check
    CHECK (kind IN ('apns', 'fcm', 'huawei')) NOT VALID;
