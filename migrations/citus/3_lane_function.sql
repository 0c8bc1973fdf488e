-- Step 3 of `pushizo-worker distribute` (docs/scale-out.md, "The shape: queue lanes"): `pushizo_lane()` draws from
-- one representative value per shard, the least value of each of Citus's hash ranges for `citus.shard_count`
-- (`worker_hash`, ranges of 2^32 / shard count, the last ending at 2^31 - 1), so that each shard holds exactly one
-- lane. The function is replaced only when its body differs: run again after a change of the shard count, it
-- writes the new representatives.
DO $do$
DECLARE
    shards integer := current_setting('citus.shard_count')::integer;
    lanes integer[];
    body text;
BEGIN
    SELECT array_agg(v ORDER BY v) INTO lanes FROM (
        SELECT min(v) AS v FROM generate_series(0, 100 * shards) v
        GROUP BY least(shards - 1, (worker_hash(v)::bigint + 2147483648) / (4294967296 / shards))) s;
    IF cardinality(lanes) IS DISTINCT FROM shards THEN
        RAISE EXCEPTION 'found % representatives for % shards', cardinality(lanes), shards;
    END IF;
    body := format(' SELECT (%L::integer[])[1 + floor(random() * %s)::integer] ', lanes::text, shards);
    IF (SELECT prosrc FROM pg_proc WHERE oid = 'pushizo_lane()'::regprocedure) IS DISTINCT FROM body THEN
        EXECUTE format('CREATE OR REPLACE FUNCTION pushizo_lane() RETURNS integer LANGUAGE sql VOLATILE PARALLEL SAFE AS %L', body);
    END IF;
END
$do$;
