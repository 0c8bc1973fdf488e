-- Retries that spend no attempt (the provider unreachable, the channel paused, the frequency-cap store or
-- the message unavailable) are counted apart, so they end too: past PUSHIZO_MAX_UNCOUNTED_RETRIES the
-- delivery fails with reason retries_exhausted, and only the first few of them write a `retrying` event.
ALTER TABLE deliveries ADD COLUMN uncounted_retries integer NOT NULL DEFAULT 0;
