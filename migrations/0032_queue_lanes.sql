-- Queue lanes (docs/scale-out.md, "The shape: queue lanes"): `pushizo_lane()` and a `lane integer NOT NULL` column on
-- the tables of the lanes' colocation group (subscriptions, deliveries, delivery_pages, app_claim_turns,
-- expansion_slices, delivery_events). On a single PostgreSQL every lane is 0 and nothing reads the column: the
-- schema, the triggers, the keys and the worker's statements keep their single-node forms. `pushizo-worker
-- distribute` (on a Citus coordinator) replaces the function's body with a draw from one representative value per
-- shard and distributes the tables by `lane`.
--
-- Each column is added with the constant default 0 (PostgreSQL stores it in the catalog: no table rewrite, no scan,
-- however many rows), then given `DEFAULT pushizo_lane()` for the rows inserted from now on. The worker's expansion
-- writes each delivery's lane from its subscription itself, so no insert of the worker calls the default per row.
--
-- Locks: each ALTER TABLE takes ACCESS EXCLUSIVE on its table for a catalog update only (the partitions of
-- delivery_events with it). Only added: the previous release's worker names its columns, so its inserts get lane 0
-- from the default.
CREATE FUNCTION pushizo_lane() RETURNS integer LANGUAGE sql VOLATILE PARALLEL SAFE AS $$ SELECT 0 $$;
COMMENT ON FUNCTION pushizo_lane() IS
    'The lane of a new row (docs/scale-out.md, "The shape: queue lanes"): 0 on a single node; on Citus a draw from one representative value per shard, written by pushizo-worker distribute.';

ALTER TABLE subscriptions ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE subscriptions ALTER COLUMN lane SET DEFAULT pushizo_lane();
ALTER TABLE deliveries ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE deliveries ALTER COLUMN lane SET DEFAULT pushizo_lane();
ALTER TABLE delivery_pages ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE delivery_pages ALTER COLUMN lane SET DEFAULT pushizo_lane();
ALTER TABLE app_claim_turns ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE app_claim_turns ALTER COLUMN lane SET DEFAULT pushizo_lane();
ALTER TABLE expansion_slices ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE expansion_slices ALTER COLUMN lane SET DEFAULT pushizo_lane();
-- On the partitioned parent: PostgreSQL adds the column to every partition and sets the default on each, and the
-- day partitions created later (LIKE delivery_events INCLUDING DEFAULTS) take both.
ALTER TABLE delivery_events ADD COLUMN lane integer NOT NULL DEFAULT 0;
ALTER TABLE delivery_events ALTER COLUMN lane SET DEFAULT pushizo_lane();
