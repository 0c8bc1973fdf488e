#!/usr/bin/env bash
# What each index and foreign key of `deliveries` costs per inserted row during expansion (docs/performance.md,
# "Expansion and the deliveries schema"). In a throwaway database on the server of $1 (a libpq URL): the
# migrations, one app, N subscriptions (default 1,000,000) and one notification; then for each variant the
# same N-row expansion in chunks of 5,000 (the worker's INSERT ... SELECT ... ON CONFLICT DO NOTHING, all in
# one plpgsql call), timed by the server (clock_timestamp), on a freshly truncated and vacuumed table.
#   scripts/bench/deliveries-schema-cost.sh 'host=... port=... user=postgres' [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:?libpq URL of the server (the database is ignored)}
n=${2:-1000000}
db=pushizo_schema_cost_$$
psql "$base" -qAtc "CREATE DATABASE $db" >/dev/null
url="$base dbname=$db"
trap 'psql "$base" -qAtc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true' EXIT
for f in migrations/*.sql; do psql "$url" -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null; done
psql "$url" -q -v ON_ERROR_STOP=1 -v n="$n" <<'SQL' >/dev/null
INSERT INTO apps (id) VALUES ('00000000-0000-4000-8000-00000000c057');
INSERT INTO subscriptions (app_id, platform, token)
SELECT '00000000-0000-4000-8000-00000000c057', 'ios', md5(i::text) || md5('t' || i) FROM generate_series(1, :n) i;
INSERT INTO notifications (id, app_id, message, target)
VALUES ('00000000-0000-4000-8000-0000000c0570', '00000000-0000-4000-8000-00000000c057', '{}', '{"all": true}');
VACUUM ANALYZE;
-- One expansion in chunks of 5,000 subscriptions, as the worker does it; returns seconds.
CREATE FUNCTION bench_expand() RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE started timestamptz := clock_timestamp(); cursor_id uuid := '00000000-0000-0000-0000-000000000000'; last uuid;
BEGIN
    LOOP
        WITH page AS (
            SELECT s.id, s.app_id FROM subscriptions s
            WHERE s.app_id = '00000000-0000-4000-8000-00000000c057' AND s.status = 'active' AND s.id > cursor_id
            ORDER BY s.id LIMIT 5000
        ), ins AS (
            INSERT INTO deliveries (notification_id, subscription_id, app_id, priority)
            SELECT '00000000-0000-4000-8000-0000000c0570', id, app_id, 5 FROM page ORDER BY id
            ON CONFLICT (notification_id, subscription_id) DO NOTHING RETURNING 1
        )
        SELECT (SELECT max(id::text)::uuid FROM page) INTO last;
        EXIT WHEN last IS NULL;
        cursor_id := last;
    END LOOP;
    RETURN round(extract(epoch FROM clock_timestamp() - started)::numeric, 2);
END $$;
SQL
# Each variant: drop objects, measure, recreate them (the DDL is plain, so the measure runs on a committed schema).
variant() {  # name, drop SQL, recreate SQL
    psql "$url" -q -v ON_ERROR_STOP=1 -c "TRUNCATE deliveries" ${2:+-c "$2"} >/dev/null
    psql "$url" -qAtc "VACUUM deliveries" -c "CHECKPOINT" >/dev/null
    secs=$(psql "$url" -qAtc "SELECT bench_expand()")
    printf '  %-60s %7s s  %6.2f us/row\n' "$1" "$secs" "$(awk "BEGIN { print $secs * 1e6 / $n }")"
    psql "$url" -q -v ON_ERROR_STOP=1 -c "TRUNCATE deliveries" ${3:+-c "$3"} >/dev/null
}
echo "expansion of $n subscriptions into deliveries, chunks of 5,000 (load: $(cut -d' ' -f1-3 /proc/loadavg))"
variant "schema of every migration (0008: no FK on subscription_id)"
variant "with 0001's FK subscription_id -> subscriptions (before 0008)" "ALTER TABLE deliveries ADD CONSTRAINT deliveries_subscription_id_fkey FOREIGN KEY (subscription_id) REFERENCES subscriptions (id) ON DELETE CASCADE" "ALTER TABLE deliveries DROP CONSTRAINT deliveries_subscription_id_fkey"
variant "without deliveries_claim_order (priority DESC, run_at)" "DROP INDEX deliveries_claim_order" \
    "CREATE INDEX deliveries_claim_order ON deliveries (priority DESC, run_at)"
variant "without deliveries_subscription (subscription_id)" "DROP INDEX deliveries_subscription" \
    "CREATE INDEX deliveries_subscription ON deliveries (subscription_id)"
variant "without FK notification_id -> notifications" "ALTER TABLE deliveries DROP CONSTRAINT deliveries_notification_id_fkey" \
    "ALTER TABLE deliveries ADD CONSTRAINT deliveries_notification_id_fkey FOREIGN KEY (notification_id) REFERENCES notifications (id) ON DELETE CASCADE"
variant "without apns_id's default gen_random_uuid() (a constant)" \
    "ALTER TABLE deliveries ALTER COLUMN apns_id SET DEFAULT '00000000-0000-4000-8000-000000000000'" \
    "ALTER TABLE deliveries ALTER COLUMN apns_id SET DEFAULT gen_random_uuid()"
variant "only the primary key and the unique (notification_id, subscription_id)" \
    "DROP INDEX deliveries_claim_order; DROP INDEX deliveries_subscription; ALTER TABLE deliveries DROP CONSTRAINT deliveries_notification_id_fkey" \
    "CREATE INDEX deliveries_claim_order ON deliveries (priority DESC, run_at); CREATE INDEX deliveries_subscription ON deliveries (subscription_id); ALTER TABLE deliveries ADD CONSTRAINT deliveries_notification_id_fkey FOREIGN KEY (notification_id) REFERENCES notifications (id) ON DELETE CASCADE"
variant "schema of every migration again (noise check)"
