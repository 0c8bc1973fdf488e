-- A queue sample cancelled by its statement timeout wrote nothing, so the next worker to look found the turn
-- still due and started the same pass again: on a queue too large to count within the timeout, one backend
-- spent 30 s of every 45 s counting, not the 5 % the turn's spacing promises (docs/metrics.md, "The queue,
-- fleet-wide"). The timed-out attempt is now recorded, with how long it ran, and the turn is spaced from
-- whichever came last: the last sample or the last timeout. The last sample itself is kept as it was.
ALTER TABLE queue_depth_samples ADD COLUMN timed_out_at timestamptz;
