-- One queue sample for the whole fleet (docs/metrics.md, "The queue, fleet-wide"). Counting the queue
-- takes a pass over `deliveries`; every worker used to take it, so fifty workers made fifty passes per
-- interval. Now the worker that finds the sample due locks this row (FOR UPDATE SKIP LOCKED), measures and
-- writes it; the others read what was last written. `took_seconds` spaces the next sample out when
-- measuring is slow, so the scan keeps at most a small share of one backend busy fleet-wide.
CREATE TABLE queue_depth_samples (
    name         text PRIMARY KEY CHECK (name = 'queue'),
    sampled_at   timestamptz,
    took_seconds float8 NOT NULL DEFAULT 0 CHECK (took_seconds >= 0),
    sampled_by   text CHECK (length(sampled_by) <= 200),
    sample       jsonb CHECK (pg_column_size(sample) <= 65536)
);

-- The row exists from the start, so taking the sampler's turn is a row lock and never an insert race.
INSERT INTO queue_depth_samples (name) VALUES ('queue');
