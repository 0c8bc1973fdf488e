-- Leases per worker (`pushizo-worker status`, docs/status.md): the rows a worker holds or held and did not
-- complete, found without scanning the queue. Only claimed rows are in it: a claim sets leased_by (one index
-- insert, next to the claim-order index's), a retry's reschedule clears it and a terminal completion deletes the
-- row, so it holds about `concurrency` rows per worker plus the expired leases of workers that died.
-- Built inside the migration's transaction (not CONCURRENTLY): on a large queue, run it while claims are idle.
CREATE INDEX deliveries_leased ON deliveries (leased_by, run_at) WHERE leased_by IS NOT NULL;
