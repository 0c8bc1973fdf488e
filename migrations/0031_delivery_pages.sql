-- Delivery pages (docs/performance.md, "Pages leased at expansion"): a broadcast's expansion chunk that a
-- worker leases to itself writes one row here for the whole page instead of one `deliveries` row per
-- subscription. The page's deliveries are the app's active subscriptions of the notification's audience in
-- (`after_id`, `up_to`] (`after_id` NULL: from the start), created no later than the page; their outcomes are
-- their `delivery_events` rows, written only while the page still has the completion's fence. A delivery that
-- must wait (a retry, a deferral) becomes an ordinary `deliveries` row. The row is deleted once each of its
-- deliveries is settled; a row whose lease ran out (its worker died) is rescued by another worker, which takes
-- it with `fence` + 1 and sends again what has neither a terminal event nor a `deliveries` row.
--
-- Locks: a new table; `notifications` gets a foreign key from it (a SHARE ROW EXCLUSIVE lock on notifications
-- for the instant the constraint is added to an empty table: no scan). The group roles' grants gain the table.
--
-- Only added: a previous release's worker never reads or writes it, and expands with `deliveries` rows as
-- before. Columns are by name, so a later one (a distributed table's lane) joins with a default.
CREATE TABLE delivery_pages (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id          uuid NOT NULL,
    notification_id uuid NOT NULL REFERENCES notifications (id) ON DELETE CASCADE,
    -- The deliveries' claim priority (`deliveries.priority`), for the rows a page's waiting deliveries become.
    priority        smallint NOT NULL,
    -- The expansion cursor before the page (NULL: the page starts at the first subscription) and the page's
    -- last `subscriptions.id`, inclusive.
    after_id        uuid,
    up_to           uuid NOT NULL,
    -- How many deliveries the page handed out when it was leased (its matching subscriptions then): what
    -- `status` counts in flight while the page lives.
    deliveries      integer NOT NULL CHECK (deliveries > 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- The lease, as on `deliveries` (PUSHIZO_WORKER_ID, and its end); `fence` grows by one at each rescue.
    leased_by       text NOT NULL,
    lease_until     timestamptz NOT NULL,
    fence           bigint NOT NULL DEFAULT 1,
    -- The worker whose lease ran out, set by the rescue.
    rescued_from    text
);
-- Rescues look for the pages whose lease ran out, oldest first.
CREATE INDEX delivery_pages_lease ON delivery_pages (lease_until);
-- A notification's pages: its cancel and its deletion's cascade.
CREATE INDEX delivery_pages_notification ON delivery_pages (notification_id);

-- pushizo_apply_roles() of 0029 keeps its grants under a name of its own; the function of that name now runs it and
-- grants this migration's table (pushizo_set_producer_row_security() calls it by name).
ALTER FUNCTION pushizo_apply_roles() RENAME TO pushizo_apply_roles_0029;

DO $do$
DECLARE
    q constant text := quote_ident(current_schema());
BEGIN
    EXECUTE replace($fn$
        CREATE FUNCTION @s@.pushizo_apply_roles() RETURNS void
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
            PERFORM @s@.pushizo_apply_roles_0029();
            -- Workers lease, renew, rescue and delete pages; status reads them.
            IF to_regrole('pushizo_worker') IS NOT NULL THEN
                GRANT SELECT, INSERT, UPDATE, DELETE ON @s@.delivery_pages TO pushizo_worker;
                GRANT USAGE, SELECT ON SEQUENCE @s@.delivery_pages_id_seq TO pushizo_worker;
            END IF;
            IF to_regrole('pushizo_reader') IS NOT NULL THEN
                GRANT SELECT ON @s@.delivery_pages TO pushizo_reader;
            END IF;
        END;
        $$
    $fn$, '@s@', q);
END
$do$;

REVOKE EXECUTE ON FUNCTION pushizo_apply_roles() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pushizo_apply_roles_0029() FROM PUBLIC;

SELECT pushizo_apply_roles();
