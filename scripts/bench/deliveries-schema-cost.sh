#!/usr/bin/env bash
# What each index, foreign key and trigger of `deliveries` costs per inserted row during expansion
# (docs/performance.md, "Expansion and the deliveries schema"). In a throwaway database on the server of $1 (a
# libpq URL): the migrations, one app, N subscriptions (default 1,000,000) and one notification; then for each
# variant the same N-row expansion in chunks of 5,000 (the worker's chunk statement for {"all": true}: a page
# of subscriptions, INSERT ... SELECT ... ON CONFLICT DO NOTHING, the page's count and last id; all in one
# plpgsql call), timed by the server (clock_timestamp, and the backend's CPU time, which a loaded machine
# disturbs less), on a freshly truncated and vacuumed table. Each variant
# runs ROUNDS times (default 1), the rounds interleaved, so a change in the machine's load spreads over all.
#   scripts/bench/deliveries-schema-cost.sh 'host=... port=... user=postgres' [N] [ROUNDS] [VARIANT...]
# VARIANT: names of the variants to run (default all; `full` always runs first).
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:?libpq URL of the server (the database is ignored)}
n=${2:-1000000}
rounds=${3:-1}
shift $(( $# < 3 ? $# : 3 ))
db=pushizo_schema_cost_$$
psql "$base" -qAtc "CREATE DATABASE $db" >/dev/null
url="$base dbname=$db"
trap 'psql "$base" -qAtc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true' EXIT
for f in migrations/*.sql; do psql "$url" -q -1 -v ON_ERROR_STOP=1 -f "$f" >/dev/null; done
psql "$url" -q -v ON_ERROR_STOP=1 -v n="$n" <<'SQL' >/dev/null
INSERT INTO apps (id) VALUES ('00000000-0000-4000-8000-00000000c057');
INSERT INTO subscriptions (app_id, platform, token)
SELECT '00000000-0000-4000-8000-00000000c057', 'ios', md5(i::text) || md5('t' || i) FROM generate_series(1, :n) i;
INSERT INTO notifications (id, app_id, message, target)
VALUES ('00000000-0000-4000-8000-0000000c0570', '00000000-0000-4000-8000-00000000c057', '{}', '{"all": true}');
VACUUM ANALYZE;
-- One expansion in chunks of 5,000 subscriptions, with the worker's chunk statement (AudienceQuery, target
-- {"all": true}, no platform narrowing); returns the seconds it took and the CPU seconds of this backend
-- (user + system from /proc/self/stat, in clock ticks of 1/100 s), which a loaded machine inflates less.
CREATE FUNCTION bench_cpu_ticks() RETURNS bigint LANGUAGE sql AS $$
    SELECT f[14]::bigint + f[15]::bigint FROM string_to_array(pg_read_file('/proc/self/stat'), ' ') f
$$;
-- The insert's guard against duplicates: 'conflict' (the worker's ON CONFLICT DO NOTHING), 'plain' (none: a
-- duplicate would fail the statement), 'not-exists' (WHERE NOT EXISTS on the unique key). Planned per chunk, as
-- the worker's unnamed statements are.
CREATE FUNCTION bench_expand(guard text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE started timestamptz := clock_timestamp(); cursor_id uuid := '00000000-0000-0000-0000-000000000000';
        last uuid; scanned bigint; created bigint; ticks bigint := bench_cpu_ticks();
        statement text := format($q$
        WITH page AS (
            SELECT s.id, s.app_id, s.user_id, s.platform, s.language, s.country, s.timezone, s.kind
            FROM subscriptions s
            WHERE s.app_id = '00000000-0000-4000-8000-00000000c057' AND s.status = 'active' AND s.id > $1
              AND TRUE
            ORDER BY s.id
            LIMIT 5000
        ), inserted AS (
            INSERT INTO deliveries (notification_id, subscription_id, app_id, priority)
            SELECT '00000000-0000-4000-8000-0000000c0570'::uuid, s.id, s.app_id, 5::smallint
            FROM page s
            WHERE (NULL::text[] IS NULL OR s.platform = ANY(NULL::text[])) AND s.kind = 'device' %s
            ORDER BY s.id
            %s
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM page), (SELECT id FROM page ORDER BY id DESC LIMIT 1),
               (SELECT count(*) FROM inserted)
        $q$,
        CASE WHEN guard = 'not-exists' THEN 'AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification_id = '
            || '''00000000-0000-4000-8000-0000000c0570'' AND d.subscription_id = s.id)' ELSE '' END,
        CASE WHEN guard = 'conflict' THEN 'ON CONFLICT (notification_id, subscription_id) DO NOTHING' ELSE '' END);
BEGIN
    LOOP
        EXECUTE statement USING cursor_id INTO scanned, last, created;
        EXIT WHEN last IS NULL;
        cursor_id := last;
    END LOOP;
    RETURN round(extract(epoch FROM clock_timestamp() - started)::numeric, 2) || ' ' || round((bench_cpu_ticks() - ticks) / 100.0, 2);
END $$;
SQL
unthrottled="CREATE INDEX deliveries_claim_unthrottled ON deliveries (priority DESC, run_at) WHERE NOT throttled"
subscription="CREATE INDEX deliveries_subscription ON deliveries (subscription_id)"
insert_trigger="CREATE TRIGGER deliveries_inserted AFTER INSERT ON deliveries REFERENCING NEW TABLE AS new_deliveries FOR EACH STATEMENT EXECUTE FUNCTION pushizo_deliveries_inserted()"
wake_trigger="CREATE TRIGGER deliveries_wake AFTER INSERT ON deliveries FOR EACH STATEMENT EXECUTE FUNCTION pushizo_wake()"
# name | description | drop SQL | recreate SQL | insert guard (default conflict). The first two put back what
# migration 0015 removed; the others take away one object of the current schema.
variants=(
"full|schema of every migration||"
"with-claim-order|with 0001's deliveries_claim_order (priority DESC, run_at) (dropped by 0015)|CREATE INDEX deliveries_claim_order ON deliveries (priority DESC, run_at)|DROP INDEX deliveries_claim_order"
"with-notification-fk|with 0001's FK notification_id -> notifications (replaced by triggers in 0015)|ALTER TABLE deliveries ADD CONSTRAINT deliveries_notification_id_fkey FOREIGN KEY (notification_id) REFERENCES notifications (id) ON DELETE CASCADE|ALTER TABLE deliveries DROP CONSTRAINT deliveries_notification_id_fkey"
"with-subscription-fk|with 0001's FK subscription_id -> subscriptions (replaced by a trigger in 0008)|ALTER TABLE deliveries ADD CONSTRAINT deliveries_subscription_id_fkey FOREIGN KEY (subscription_id) REFERENCES subscriptions (id) ON DELETE CASCADE|ALTER TABLE deliveries DROP CONSTRAINT deliveries_subscription_id_fkey"
"no-unthrottled|without deliveries_claim_unthrottled (priority DESC, run_at) WHERE NOT throttled|DROP INDEX deliveries_claim_unthrottled|$unthrottled"
"no-subscription|without deliveries_subscription (subscription_id)|DROP INDEX deliveries_subscription|$subscription"
"no-insert-trigger|without deliveries_inserted (notification check, throttle flag, transition table)|DROP TRIGGER deliveries_inserted ON deliveries|$insert_trigger"
"no-wake-trigger|without the wake-up trigger (one NOTIFY per statement)|DROP TRIGGER deliveries_wake ON deliveries|$wake_trigger"
"constant-apns-id|apns_id default a constant instead of gen_random_uuid()|ALTER TABLE deliveries ALTER COLUMN apns_id SET DEFAULT '00000000-0000-4000-8000-000000000000'|ALTER TABLE deliveries ALTER COLUMN apns_id SET DEFAULT gen_random_uuid()"
"plain-insert|no ON CONFLICT DO NOTHING (plain INSERT: a duplicate would fail)|||plain"
"not-exists|WHERE NOT EXISTS on (notification_id, subscription_id) instead of ON CONFLICT|||not-exists"
"sequence-cache|the id sequence with CACHE 100 (one sequence update per 100 rows per session)|ALTER SEQUENCE deliveries_id_seq CACHE 100|ALTER SEQUENCE deliveries_id_seq CACHE 1"
"bare|only the primary key and the unique (notification_id, subscription_id)|DROP INDEX deliveries_claim_unthrottled, deliveries_subscription; DROP TRIGGER deliveries_inserted ON deliveries; DROP TRIGGER deliveries_wake ON deliveries|$unthrottled; $subscription; $insert_trigger; $wake_trigger"
)
wanted=" ${*:-} "
# Each variant: drop objects, measure, recreate them (the DDL is plain, so the measure runs on a committed schema).
variant() {  # description, drop SQL, recreate SQL, insert guard
    psql "$url" -q -v ON_ERROR_STOP=1 -c "TRUNCATE deliveries" ${2:+-c "$2"} >/dev/null
    psql "$url" -qAtc "VACUUM deliveries" -c "CHECKPOINT" >/dev/null
    read -r secs cpu < <(psql "$url" -qAtc "SELECT bench_expand('${4:-conflict}')")
    printf '  %-80s %6s s %6.2f us/row  CPU %6s s %6.2f us/row  (load %s)\n' "$1" "$secs" \
        "$(awk "BEGIN { print $secs * 1e6 / $n }")" "$cpu" "$(awk "BEGIN { print $cpu * 1e6 / $n }")" "$(cut -d' ' -f1 /proc/loadavg)"
    psql "$url" -q -v ON_ERROR_STOP=1 -c "TRUNCATE deliveries" ${3:+-c "$3"} >/dev/null
}
echo "expansion of $n subscriptions into deliveries, chunks of 5,000, $rounds round(s) (load: $(cut -d' ' -f1-3 /proc/loadavg))"
for round in $(seq 1 "$rounds"); do
    for v in "${variants[@]}"; do
        IFS='|' read -r name description drop recreate guard <<<"$v"
        [ "$wanted" = "  " ] || [ "$name" = full ] || [[ "$wanted" == *" $name "* ]] || continue
        variant "$description" "$drop" "$recreate" "$guard"
    done
done
