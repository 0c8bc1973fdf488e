#!/usr/bin/env bash
# Measures what docs/data-lifecycle.md reports: notification_counts before (migration 0005, grouping the events)
# and after (0006, count deltas), and the cost of converting an unpartitioned delivery_events in place.
#   scripts/measure-lifecycle.sh "host=/tmp/pg port=5432 user=postgres" [EVENTS_OF_ONE_NOTIFICATION] [OTHER_EVENTS]
# Creates and drops the database pushizo_measure on that server. Timings are psql's \timing, best of 3 reads.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?connection string without dbname}
big=${2:-1000000}
others=${3:-1000000}
db="$base dbname=pushizo_measure"
psql "$base dbname=postgres" -qc "DROP DATABASE IF EXISTS pushizo_measure" -c "CREATE DATABASE pushizo_measure"
for f in migrations/000[1-5]_*.sql; do psql "$db" -q -v ON_ERROR_STOP=1 -1 -f "$f" >/dev/null; done
psql "$db" -q -v ON_ERROR_STOP=1 <<SQL >/dev/null
INSERT INTO apps (id) VALUES ('00000000-0000-0000-0000-000000000001');
INSERT INTO notifications (id, app_id, message, target, status, targeted_count)
SELECT CASE WHEN i = 0 THEN '00000000-0000-0000-0000-0000000000aa'::uuid ELSE gen_random_uuid() END,
       '00000000-0000-0000-0000-000000000001', '{}', '{"all": true}', 'expanded', 1000
FROM generate_series(0, 1000) AS i;
-- One broadcast of $big events over the last 10 days, and $others events of 1,000 other notifications.
INSERT INTO delivery_events (at, app_id, notification_id, subscription_id, event, attempt)
SELECT now() - make_interval(secs => i * 864000.0 / $big), '00000000-0000-0000-0000-000000000001',
       '00000000-0000-0000-0000-0000000000aa', gen_random_uuid(),
       (ARRAY['sent', 'sent', 'sent', 'failed', 'retrying', 'skipped', 'deferred'])[1 + i % 7], 1
FROM generate_series(1, $big) AS i;
INSERT INTO delivery_events (at, app_id, notification_id, subscription_id, event, attempt)
SELECT now() - make_interval(secs => i * 864000.0 / $others), '00000000-0000-0000-0000-000000000001',
       ids.a[1 + i % 1000], gen_random_uuid(), 'sent', 1
FROM generate_series(1, $others) AS i,
     (SELECT array_agg(id) AS a FROM notifications WHERE id <> '00000000-0000-0000-0000-0000000000aa') AS ids;
VACUUM ANALYZE;
SQL
reads() {
    psql "$db" -X <<'SQL' | grep -E '^Time' | sed -n '1,6p'
\timing on
SELECT * FROM notification_counts WHERE notification_id = '00000000-0000-0000-0000-0000000000aa';
SELECT * FROM notification_counts WHERE notification_id = '00000000-0000-0000-0000-0000000000aa';
SELECT * FROM notification_counts WHERE notification_id = '00000000-0000-0000-0000-0000000000aa';
SELECT sum(sent), sum(failed), sum(skipped), sum(deferred) FROM notification_counts;
SELECT sum(sent), sum(failed), sum(skipped), sum(deferred) FROM notification_counts;
SELECT sum(sent), sum(failed), sum(skipped), sum(deferred) FROM notification_counts;
SQL
}
echo "events: $(psql "$db" -Atc 'SELECT count(*) FROM delivery_events'), table $(psql "$db" -Atc "SELECT pg_size_pretty(pg_total_relation_size('delivery_events'))")"
echo "before (0005): one notification x3, then all 1,001 notifications x3"
reads
echo "conversion (0006, one transaction):"
if [ -n "${PREBUILD:-}" ]; then
    start=$(date +%s.%N)
    psql "$db" -qc "CREATE UNIQUE INDEX CONCURRENTLY delivery_events_id_at ON delivery_events (id, at)"
    echo "  index built CONCURRENTLY beforehand (writers not blocked): $(echo "$(date +%s.%N) - $start" | bc) s"
fi
script=$(mktemp)
{ echo '\timing on'; cat migrations/0006_event_partitions.sql; } >"$script"
start=$(date +%s.%N)
psql "$db" -q -X -v ON_ERROR_STOP=1 -1 -f "$script" 2>/dev/null | grep -E '^Time' | awk '$2 > 100 { print "  statement over 100 ms: " $2 " ms" }'
end=$(date +%s.%N)
rm -f "$script"
echo "  whole migration: $(echo "$end - $start" | bc) s"
psql "$db" -qc "VACUUM ANALYZE" >/dev/null
echo "after (0006): one notification x3, then all 1,001 notifications x3"
reads
echo "events after: $(psql "$db" -Atc 'SELECT count(*) FROM delivery_events')"
psql "$base dbname=postgres" -qc "DROP DATABASE pushizo_measure"
