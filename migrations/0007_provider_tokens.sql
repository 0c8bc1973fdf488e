-- Provider tokens shared by the whole fleet (docs/provider-tokens.md): one current APNs provider token per
-- team + key and one FCM access token per service account, so fifty workers make one token, not fifty.
-- Keyed by a SHA-256 fingerprint of the credential's public identity; the private key is never stored here.
-- The token is sealed (AES-128-GCM under a key derived from the credential's private key): only a process
-- that can read the credential in app_channels.settings can open it. Rows are replaced under a
-- transaction-scoped advisory lock on the fingerprint and conditionally on `generation`
-- (compare-and-swap), so a token refused by the provider is replaced once fleet-wide.
CREATE TABLE provider_tokens (
    fingerprint  text PRIMARY KEY CHECK (length(fingerprint) BETWEEN 1 AND 64),
    kind         text NOT NULL CHECK (kind IN ('apns', 'fcm')),
    sealed_token bytea NOT NULL CHECK (length(sealed_token) <= 8192),
    generation   bigint NOT NULL CHECK (generation > 0),
    issued_at    timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- A sealed token is still a bearer credential to whoever also reads the channel settings: keep the table
-- to the worker's role (docs/security.md, "Shared provider tokens").
REVOKE ALL ON provider_tokens FROM PUBLIC;
