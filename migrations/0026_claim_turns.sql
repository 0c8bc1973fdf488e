-- Claims take turns by app (docs/fairness.md).
--
-- Claims used to read one index of every unlimited app's deliveries in (priority DESC, run_at) order: first in,
-- first out across tenants, so a broadcast of a million devices queued first held every other app's pushes of
-- the same priority behind it until it had drained. Now each app with due work has a turn: a claim visits the
-- apps whose turn has come, oldest turn first, and takes from each its share of the claim, in the app's own
-- priority order, through an index per app. An app that had more than its share goes to the back of the line;
-- one whose due deliveries ran out waits, off the line, until its next delivery falls due.
--
-- The per-app index replaces both claim indexes of 0012/0015 (`deliveries_claim_unthrottled`, every unlimited
-- app's rows in one order, and `deliveries_claim_throttled`, limited apps' rows per app): one index per row, as
-- before, and `deliveries.throttled` with the UPDATE that set it on every limited app's insert goes. A limited
-- app is visited only when its turn has come, and its turn is put off until its bucket holds a permit, so an idle
-- limited app costs a claim nothing.
--
-- Built inside the migration's transaction (not CONCURRENTLY): on a large queue, run it while claims are idle.

-- An app's weight in the share of each claim: an app of weight 2 gets twice the deliveries of an app of weight 1
-- in a claim both are in. Operators' setting (a plan tier), not the app team's.
ALTER TABLE apps ADD COLUMN claim_weight smallint NOT NULL DEFAULT 1
    CONSTRAINT apps_claim_weight_range CHECK (claim_weight BETWEEN 1 AND 100);

-- One row per app that has ever queued a delivery. turn_at: when the app may next be visited by a claim. It is
-- at or before the run_at of every delivery of the app (a lower bound: a claim that visits early finds nothing
-- and looks the exact time up), except that a limited app's turn waits for its bucket's next permit and that an
-- app that had its full share goes to the back of the line (turn_at = the claim's now()). Every writer that can
-- make a delivery due earlier lowers it in the same transaction: the deliveries insert trigger (below), the
-- completion that reschedules a delivery, and the claim itself. Each such writer updates the row even when the
-- time does not move, so that a claim which computed a later turn from a snapshot that could not see the new
-- deliveries notices the row changed (its xmin) and keeps the earlier time. `pushizo_claim_turns_repair()` puts
-- right what other writers (an operator's UPDATE of run_at) leave behind; the worker runs it every few seconds.
CREATE TABLE app_claim_turns (
    app_id  uuid PRIMARY KEY REFERENCES apps (id) ON DELETE CASCADE,
    turn_at timestamptz NOT NULL
);
CREATE INDEX app_claim_turns_due ON app_claim_turns (turn_at);

INSERT INTO app_claim_turns (app_id, turn_at)
SELECT d.app_id, min(d.run_at) FROM deliveries d JOIN apps a ON a.id = d.app_id GROUP BY d.app_id;

CREATE INDEX deliveries_claim_app ON deliveries (app_id, priority DESC, run_at);
DROP INDEX deliveries_claim_unthrottled;
DROP INDEX deliveries_claim_throttled;

-- The insert trigger of 0015/0020 without the throttle flag, and with the inserted apps' turns: one upsert per
-- distinct app of the statement, in app order (two transactions that each insert for several apps take the turn
-- rows in the same order and cannot deadlock on them).
CREATE OR REPLACE FUNCTION pushizo_deliveries_inserted() RETURNS trigger
    LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    wanted uuid[];
    locked bigint;
BEGIN
    SELECT array_agg(w.notification_id) INTO wanted FROM (SELECT DISTINCT notification_id FROM new_deliveries) w;
    IF wanted IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM notifications WHERE id = ANY (wanted) FOR KEY SHARE;
    GET DIAGNOSTICS locked = ROW_COUNT;
    IF locked < cardinality(wanted) THEN
        RAISE EXCEPTION 'insert or update on table "deliveries" violates its notification reference'
            USING ERRCODE = 'foreign_key_violation', TABLE = 'deliveries', COLUMN = 'notification_id',
                  DETAIL = format('Key (notification_id)=(%s) is not present in table "notifications".',
                                  (SELECT w FROM unnest(wanted) w
                                   WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = w) LIMIT 1));
    END IF;
    INSERT INTO app_claim_turns (app_id, turn_at)
    SELECT app_id, min(run_at) FROM new_deliveries GROUP BY app_id ORDER BY app_id
    ON CONFLICT (app_id) DO UPDATE SET turn_at = least(app_claim_turns.turn_at, excluded.turn_at);
    RETURN NULL;
END;
$$;

-- 0012/0024's trigger for a changed send limit, without the flag: the bucket is made or dropped, and the app's
-- turn comes now (a turn put off for a permit of the old limit would otherwise still wait).
DO $do$
DECLARE
    q constant text := quote_ident(current_schema());
BEGIN
    EXECUTE replace($fn$
        CREATE OR REPLACE FUNCTION @s@.pushizo_app_throttle_changed() RETURNS trigger
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
        BEGIN
            IF NEW.max_sends_per_second IS NOT NULL THEN
                INSERT INTO @s@.app_send_buckets (app_id, tokens)
                VALUES (NEW.id, @s@.pushizo_send_burst(NEW.max_sends_per_second))
                ON CONFLICT (app_id) DO NOTHING;
            ELSE
                DELETE FROM @s@.app_send_buckets WHERE app_id = NEW.id;
            END IF;
            IF TG_OP = 'UPDATE' THEN
                UPDATE @s@.app_claim_turns SET turn_at = least(turn_at, now()) WHERE app_id = NEW.id;
            END IF;
            RETURN NULL;
        END;
        $body$
    $fn$, '@s@', q);
END;
$do$;

ALTER TABLE deliveries DROP COLUMN throttled;

-- The earliest run_at of an app's deliveries other than p_except (NULL when it has none): one probe of
-- deliveries_claim_app per distinct priority of the app (a loose index scan), however many deliveries wait.
-- What a claim sets as the turn of an app whose due deliveries ran out (p_except: those it just claimed), and
-- what the repair below computes. STABLE: it reads with the calling statement's snapshot.
CREATE FUNCTION pushizo_next_run_at(p_app uuid, p_except bigint[]) RETURNS timestamptz
    LANGUAGE sql STABLE AS $$
    WITH RECURSIVE p AS (
        SELECT (SELECT max(priority) FROM deliveries WHERE app_id = p_app) AS priority
        UNION ALL
        SELECT (SELECT max(priority) FROM deliveries WHERE app_id = p_app AND priority < p.priority)
        FROM p WHERE p.priority IS NOT NULL
    )
    SELECT min(n.run_at) FROM p CROSS JOIN LATERAL (
        SELECT run_at FROM deliveries
        WHERE app_id = p_app AND priority = p.priority AND id <> ALL(p_except)
        ORDER BY run_at LIMIT 1) n
    WHERE p.priority IS NOT NULL
$$;

-- The next turn of each app whose turn is in the future (but not 'infinity': no delivery left), from its
-- deliveries as they are now: what a claim would have set had it seen every write. For apps whose deliveries
-- were made due earlier by a writer that does not lower turns (an operator's `UPDATE deliveries SET run_at =
-- now() ...`). Rows another transaction holds are skipped (that transaction moves the turn itself). A limited
-- app's turn is not moved while its bucket holds less than a permit. Returns how many turns it brought forward.
CREATE FUNCTION pushizo_claim_turns_repair() RETURNS integer
    LANGUAGE plpgsql AS $$
DECLARE
    locked uuid[];
    moved integer;
BEGIN
    -- Locked first, in a statement of its own: the next statement's snapshot is taken after the locks, so it
    -- sees every delivery a writer that held one of these rows committed.
    SELECT array_agg(app_id ORDER BY app_id) INTO locked FROM (
        SELECT app_id FROM app_claim_turns WHERE turn_at > now() AND turn_at < 'infinity'
        ORDER BY app_id FOR UPDATE SKIP LOCKED) t;
    IF locked IS NULL THEN
        RETURN 0;
    END IF;
    UPDATE app_claim_turns t SET turn_at = x.next_at
    FROM (SELECT a.app_id, pushizo_next_run_at(a.app_id, '{}') AS next_at FROM unnest(locked) AS a(app_id)) x
    WHERE t.app_id = x.app_id AND x.next_at < t.turn_at
      AND NOT EXISTS (SELECT 1 FROM apps a JOIN app_send_buckets b ON b.app_id = a.id
                      WHERE a.id = t.app_id AND a.max_sends_per_second IS NOT NULL
                        AND pushizo_bucket_permits(a.max_sends_per_second, b.tokens, b.refilled_at, clock_timestamp()) < 1);
    GET DIAGNOSTICS moved = ROW_COUNT;
    RETURN moved;
END;
$$;
