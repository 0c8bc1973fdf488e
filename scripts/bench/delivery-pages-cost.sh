#!/usr/bin/env bash
# What PostgreSQL does per broadcast delivery when the expansion leases whole pages (`delivery_pages`) instead of
# rows (docs/performance.md, "Pages leased at expansion"), beside today's leased rows and the floor, each alone on
# a throwaway database of the server of $1 (a libpq URL): the migrations, one app with an APNs channel, N active
# subscriptions (default 100,000) and one {"all": true} notification. One psql session per variant, every
# statement its own transaction as the worker sends it; the server's CPU is the postmaster's and its children's
# (live and reaped: the backend, the WAL writer, the checkpointer, autovacuum) over the variant, in ticks.
#   floor  the deliveries' `delivery_events` rows alone, in batches of BATCH (event-floor.pgbench's statement);
#   rows   per page of PAGE subscriptions: the notification locked, the leasing chunk (AudienceQuery's statement
#          with a lease: leased `deliveries` rows returned in the claim's row shape), the cursor saved; then the
#          page's completions as `sent` in batches of BATCH (CompletionStore.completeSQL, prepared);
#   pages  the same, the chunk inserting one `delivery_pages` row and returning the page's subscriptions in the
#          claim's row shape, the completions writing the events fenced on the page row, the last one deleting it;
#   direct pages, the claim's row shape taking each subscription's columns from the page's read (no second lookup).
# Each completion's arrays are read from a table built before the clock starts (as the floor's are) and sent as
# text; the worker sends them in binary.
#   scripts/bench/delivery-pages-cost.sh 'host=... port=... user=postgres' [N] [ROUNDS] [PAGE] [BATCH]
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:?libpq URL of the server (the database is ignored)}
n=${2:-100000}
rounds=${3:-1}
page=${4:-1000}
batch=${5:-250}
db=pushizo_pages_cost_$$
psql "$base" -qAtc "CREATE DATABASE $db" >/dev/null
url="$base dbname=$db"
trap 'psql "$base" -qAtc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true' EXIT
for f in migrations/*.sql; do psql "$url" -q -1 -v ON_ERROR_STOP=1 -f "$f" >/dev/null; done
app=00000000-0000-4000-8000-00000000c057
nid=00000000-0000-4000-8000-0000000c0570
psql "$url" -q -v ON_ERROR_STOP=1 -v n="$n" -v page="$page" -v batch="$batch" <<SQL >/dev/null
INSERT INTO apps (id) VALUES ('$app');
INSERT INTO app_channels (app_id, provider, settings) VALUES ('$app', 'apns', '{"team_id": "T", "key_id": "K", "topic": "t"}');
INSERT INTO subscriptions (app_id, platform, token)
SELECT '$app', 'ios', md5(i::text) || md5('t' || i) FROM generate_series(1, :n) i;
INSERT INTO notifications (id, app_id, message, target) VALUES ('$nid', '$app', '{}', '{"all": true}');
-- Batch k of page p: its deliveries' completion arrays (ids as the rows variant's identity gives them, page ids as
-- the pages variant's), and whether it is its page's last.
CREATE TABLE bench_batches AS
SELECT k / :batch + 1 AS batch, min(k / :page) + 1 AS page_id, (max(k) + 1) % :page = 0 OR max(k) + 1 = :n AS last_of_page,
       array_agg(k + 1 ORDER BY k) AS ids, array_agg(1::bigint ORDER BY k) AS fences,
       array_agg(k / :page + 1 ORDER BY k) AS page_ids,
       array_agg('sent'::text ORDER BY k) AS events, array_agg(NULL::text ORDER BY k) AS reasons,
       array_agg(json_build_object('provider_message_id', apns_id, 'apns_id', apns_id, 'provider', 'apns')::text ORDER BY k) AS details,
       array_agg(NULL::timestamptz ORDER BY k) AS next_run_ats, array_agg(NULL::text ORDER BY k) AS last_errors,
       array_agg(false ORDER BY k) AS refunds, array_agg(app_id ORDER BY k) AS app_ids,
       array_agg('$nid'::uuid ORDER BY k) AS notification_ids, array_agg(id ORDER BY k) AS subscription_ids,
       array_agg(1 ORDER BY k) AS attempts, array_agg(true ORDER BY k) AS writes_events,
       array_agg(false ORDER BY k) AS uncounted
FROM (SELECT row_number() OVER (ORDER BY id) - 1 AS k, id, app_id, gen_random_uuid() AS apns_id FROM subscriptions) s
GROUP BY k / :batch;
ALTER TABLE bench_batches ADD PRIMARY KEY (batch);
-- The backend's own CPU (user + system from /proc/self/stat, in clock ticks).
CREATE FUNCTION bench_cpu_ticks() RETURNS bigint LANGUAGE sql AS \$\$
    SELECT f[14]::bigint + f[15]::bigint FROM string_to_array(pg_read_file('/proc/self/stat'), ' ') f
\$\$;
VACUUM ANALYZE;
SQL
batches=$(psql "$url" -qAtc "SELECT count(*) FROM bench_batches")
pages=$(( (n + page - 1) / page ))

# The claim's row shape (ClaimStore.claimedRowsSources and claimedRowsSelect), as claim-complete.pgbench holds it.
claim_tail=$(sed -n '/^-- The claimed apps. settings and channels/,/^        WHEN .ios. THEN .apns./p' scripts/bench/claim-complete.pgbench \
    | sed 's/^claim_rows AS (/leased AS (/')
completion=$(sed -n '/^WITH input AS (/,/^SELECT count(\*) AS applied/p' scripts/bench/claim-complete.pgbench \
    | sed -e 's/:ids::bigint\[\]/$1::bigint[]/; s/:fences::/$2::/; s/:events::/$3::/; s/:reasons::/$4::/; s/:details::/$5::/' \
          -e 's/:next_run_ats::/$6::/; s/:last_errors::/$7::/; s/:refunds::/$8::/; s/:app_ids::/$9::/; s/:notification_ids::/$10::/' \
          -e 's/:subscription_ids::/$11::/; s/:attempts::/$12::/; s/:writes_events::/$13::/; s/:uncounted::/$14::/')
page_cte="SELECT s.id, s.app_id, s.user_id, s.platform, s.language, s.country, s.timezone, s.kind
    FROM subscriptions s
    WHERE s.app_id = '$app' AND s.status = 'active' AND s.id > :'cursor'::uuid
    ORDER BY s.id
    LIMIT $page"
match="(NULL::text[] IS NULL OR s.platform = ANY(NULL::text[])) AND s.kind = 'device'"

rows_chunk="WITH page AS (
$page_cte
), claimed AS (
    INSERT INTO deliveries (notification_id, subscription_id, app_id, priority, run_at, attempt, fence, leased_by)
    SELECT '$nid'::uuid, s.id, s.app_id, 5::smallint, now() + make_interval(secs => 120::float8), 1, 1, 'bench'
    FROM page s
    WHERE $match
    ORDER BY s.id
    ON CONFLICT (notification_id, subscription_id) DO NOTHING
    RETURNING id, fence, attempt, notification_id, subscription_id, app_id, apns_id, uncounted_retries,
              local_due_at, NULL::text AS rescued_from
),
$claim_tail
)
SELECT (SELECT count(*) FROM page) AS scanned, (SELECT id FROM page ORDER BY id DESC LIMIT 1) AS last_id,
       (SELECT count(*) FROM claimed) AS created, l.*
FROM (SELECT) chunk LEFT JOIN leased l ON true"

pages_chunk="WITH page AS (
$page_cte
), leased_page AS (
    INSERT INTO delivery_pages (app_id, notification_id, priority, after_id, up_to, deliveries, leased_by, lease_until)
    SELECT '$app', '$nid', 5, nullif(:'cursor'::uuid, '00000000-0000-0000-0000-000000000000'),
           (SELECT id FROM page ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM page), 'bench',
           now() + make_interval(secs => 120::float8)
    WHERE EXISTS (SELECT FROM page)
    RETURNING id, fence
), claimed AS (
    SELECT p.id, p.fence, 1 AS attempt, '$nid'::uuid AS notification_id, s.id AS subscription_id, s.app_id,
           gen_random_uuid() AS apns_id, 0 AS uncounted_retries, NULL::timestamptz AS local_due_at,
           NULL::text AS rescued_from
    FROM page s CROSS JOIN leased_page p
    WHERE $match
),
$claim_tail
)
SELECT (SELECT count(*) FROM page) AS scanned, (SELECT id FROM page ORDER BY id DESC LIMIT 1) AS last_id,
       (SELECT count(*) FROM claimed) AS created, l.*
FROM (SELECT) chunk LEFT JOIN leased l ON true"

# The same, the claim's row shape reading each subscription's columns from the page's own read instead of looking
# the subscription up again by key.
direct_tail=$(printf '%s\n' "$claim_tail" | sed 's/LEFT JOIN LATERAL (SELECT \* FROM subscriptions WHERE id = c.subscription_id OFFSET 0) s ON true/LEFT JOIN LATERAL (SELECT (c.sub).*) s ON true/')
direct_chunk="WITH page AS (
$(printf '%s\n' "$page_cte" | sed 's/SELECT s.id, s.app_id, s.user_id, s.platform, s.language, s.country, s.timezone, s.kind/SELECT s.*/')
), leased_page AS (
    INSERT INTO delivery_pages (app_id, notification_id, priority, after_id, up_to, deliveries, leased_by, lease_until)
    SELECT '$app', '$nid', 5, nullif(:'cursor'::uuid, '00000000-0000-0000-0000-000000000000'),
           (SELECT id FROM page ORDER BY id DESC LIMIT 1), (SELECT count(*) FROM page), 'bench',
           now() + make_interval(secs => 120::float8)
    WHERE EXISTS (SELECT FROM page)
    RETURNING id, fence
), claimed AS (
    SELECT p.id, p.fence, 1 AS attempt, '$nid'::uuid AS notification_id, s.id AS subscription_id, s.app_id,
           gen_random_uuid() AS apns_id, 0 AS uncounted_retries, NULL::timestamptz AS local_due_at,
           NULL::text AS rescued_from, ROW(s.*)::subscriptions AS sub
    FROM page s CROSS JOIN leased_page p
    WHERE $match
),
$direct_tail
)
SELECT (SELECT count(*) FROM page) AS scanned, (SELECT id FROM page ORDER BY id DESC LIMIT 1) AS last_id,
       (SELECT count(*) FROM claimed) AS created, l.*
FROM (SELECT) chunk LEFT JOIN leased l ON true"

# A page's completions: events only for pages that still hold the completion's fence (locked FOR SHARE, so a
# rescue's fence update waits for this statement's commit, or the page deleted by its last completion); waiting
# deliveries become ordinary rows.
pages_completion='WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
                         $7::text[], $8::uuid[], $9::uuid[], $10::uuid[], $11::uuid[], $12::integer[], $13::bool[])
        AS i(page_id, fence, event, reason, detail, next_run_at, last_error, apns_id, app_id, notification_id,
             subscription_id, attempt, writes_event)
), fences AS MATERIALIZED (
    SELECT DISTINCT page_id, fence FROM input
), finished AS (
    DELETE FROM delivery_pages p USING fences f
    WHERE p.id = f.page_id AND p.fence = f.fence AND p.id = ANY($14::bigint[])
    RETURNING p.id, p.priority
), held AS (
    SELECT p.id, p.priority FROM delivery_pages p JOIN fences f ON p.id = f.page_id AND p.fence = f.fence
    WHERE p.id <> ALL($14::bigint[])
    FOR SHARE OF p
), live AS MATERIALIZED (
    SELECT id, priority FROM finished UNION ALL SELECT id, priority FROM held
), waiting AS (
    INSERT INTO deliveries (notification_id, subscription_id, app_id, priority, run_at, attempt, last_error, apns_id)
    SELECT i.notification_id, i.subscription_id, i.app_id, l.priority, i.next_run_at, i.attempt, i.last_error, i.apns_id
    FROM input i JOIN live l ON l.id = i.page_id
    WHERE i.next_run_at IS NOT NULL
    ON CONFLICT (notification_id, subscription_id) DO NOTHING
    RETURNING 1
), written AS (
    INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
    SELECT i.app_id, i.notification_id, i.subscription_id, i.event, i.reason, i.attempt,
           coalesce(replace(i.detail, '"'"'\u0000'"'"', '"'"'\ufffd'"'"')::jsonb, '"'"'{}'"'"'::jsonb)
    FROM input i JOIN live l ON l.id = i.page_id
    WHERE i.writes_event
    RETURNING 1
)
SELECT (SELECT count(*) FROM written) + (SELECT count(*) FROM waiting) AS applied'

floor_statement="INSERT INTO delivery_events (app_id, notification_id, subscription_id, event, reason, attempt, detail)
SELECT i.app_id, i.notification_id, i.subscription_id, i.event, i.reason, i.attempt,
       coalesce(replace(i.detail, '\\u0000', '\\ufffd')::jsonb, '{}'::jsonb)
FROM unnest(\$1::uuid[], \$2::uuid[], \$3::uuid[], \$4::text[], \$5::text[], \$6::integer[], \$7::text[])
    AS i(app_id, notification_id, subscription_id, event, reason, attempt, detail)"

fetch_batch() {  # batch number
    echo "SELECT ids, fences, page_ids, events, reasons, details, next_run_ats, last_errors, refunds, app_ids,
       notification_ids, subscription_ids, attempts, writes_events, uncounted,
       CASE WHEN last_of_page THEN ARRAY[page_id] ELSE '{}' END AS done, array_fill(NULL::uuid, ARRAY[cardinality(ids)]) AS apns_ids
FROM bench_batches WHERE batch = $1 \\gset"
}
chunk_lock="BEGIN;
SELECT coalesce(expansion_cursor, '00000000-0000-0000-0000-000000000000') AS cursor FROM notifications WHERE id = '$nid' FOR UPDATE \\gset"
chunk_save="UPDATE notifications SET status = 'expanding', expansion_cursor = coalesce((SELECT id FROM subscriptions WHERE app_id = '$app' AND status = 'active' AND id > :'cursor'::uuid ORDER BY id OFFSET $((page - 1)) LIMIT 1), (SELECT id FROM subscriptions WHERE app_id = '$app' AND status = 'active' ORDER BY id DESC LIMIT 1)), targeted_count = coalesce(targeted_count, 0) + $page WHERE id = '$nid';
COMMIT;"
# The cursor saved is the page's last id as the chunk returned it; here read again by the same index (one probe
# per page, the same in both variants) since psql keeps one row of variables.

script() {  # variant
    local b p
    echo "\\set QUIET on"
    echo "\\o /dev/null"
    echo "SELECT bench_cpu_ticks() AS started \\gset"
    case $1 in
    fetch) for b in $(seq 1 "$batches"); do fetch_batch "$b"; done ;;
    floor) echo "PREPARE floor(uuid[], uuid[], uuid[], text[], text[], integer[], text[]) AS $floor_statement;"
           for b in $(seq 1 "$batches"); do fetch_batch "$b"; echo "EXECUTE floor(:'app_ids', :'notification_ids', :'subscription_ids', :'events', :'reasons', :'attempts', :'details');"; done ;;
    rows) echo "PREPARE complete(bigint[], bigint[], text[], text[], text[], timestamptz[], text[], bool[], uuid[], uuid[], uuid[], integer[], bool[], bool[]) AS $completion;"
          b=1
          for p in $(seq 1 "$pages"); do
              echo "$chunk_lock"; echo "$rows_chunk;"; echo "$chunk_save"
              while [ "$b" -le "$batches" ] && [ $(( (b - 1) * batch / page + 1 )) -eq "$p" ]; do
                  fetch_batch "$b"
                  echo "EXECUTE complete(:'ids', :'fences', :'events', :'reasons', :'details', :'next_run_ats', :'last_errors', :'refunds', :'app_ids', :'notification_ids', :'subscription_ids', :'attempts', :'writes_events', :'uncounted');"
                  b=$((b + 1))
              done
          done ;;
    pages|direct) echo "PREPARE complete(bigint[], bigint[], text[], text[], text[], timestamptz[], text[], uuid[], uuid[], uuid[], uuid[], integer[], bool[], bigint[]) AS $pages_completion;"
          b=1
          for p in $(seq 1 "$pages"); do
              echo "$chunk_lock"; if [ "$1" = pages ]; then echo "$pages_chunk;"; else echo "$direct_chunk;"; fi; echo "$chunk_save"
              while [ "$b" -le "$batches" ] && [ $(( (b - 1) * batch / page + 1 )) -eq "$p" ]; do
                  fetch_batch "$b"
                  echo "EXECUTE complete(:'page_ids', :'fences', :'events', :'reasons', :'details', :'next_run_ats', :'last_errors', :'apns_ids', :'app_ids', :'notification_ids', :'subscription_ids', :'attempts', :'writes_events', :'done');"
                  b=$((b + 1))
              done
          done ;;
    esac
    echo "SELECT bench_cpu_ticks() - :started AS used \\gset"
    echo "\\o $2"
    echo "\\qecho :used"
}

postmaster=$(psql "$url" -qAtc "SELECT pg_postmaster_start_time()" >/dev/null; psql "$url" -qAtc "SELECT setting FROM pg_settings WHERE name = 'data_directory'")
postmaster=$(head -n 1 "$postmaster/postmaster.pid" 2>/dev/null || sudo -u postgres head -n 1 "$postmaster/postmaster.pid")
server_ticks() {
    local total child
    total=$(awk '{ print $14 + $15 }' "/proc/$postmaster/stat")
    for child in $(pgrep -P "$postmaster"); do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$child/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
hz=$(getconf CLK_TCK)
declare -A sum
echo "$n deliveries of one {\"all\": true} broadcast, pages of $page, completions of $batch, $rounds round(s) (load: $(cut -d' ' -f1-3 /proc/loadavg))"
for round in $(seq 1 "$rounds"); do
    for v in fetch floor rows pages direct; do
        psql "$url" -q -v ON_ERROR_STOP=1 -c "TRUNCATE deliveries, delivery_pages, delivery_events RESTART IDENTITY" \
            -c "UPDATE notifications SET status = 'pending', expansion_cursor = NULL, targeted_count = NULL" >/dev/null
        psql "$url" -qAtc "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
        script "$v" "/tmp/pages-cost-$$-$v.used" >"/tmp/pages-cost-$$-$v.sql"
        sleep 0.3; others=$(server_ticks)
        psql "$url" -q -v ON_ERROR_STOP=1 -f "/tmp/pages-cost-$$-$v.sql" >/dev/null
        sleep 0.3; before=0; after=$(( $(cat "/tmp/pages-cost-$$-$v.used") + $(server_ticks) - others ))
        events=$n
        left=$(psql "$url" -qAtc "SELECT (SELECT count(*) FROM deliveries) || ' deliveries, ' || (SELECT count(*) FROM delivery_pages) || ' pages left'")
        us=$(awk "BEGIN { printf \"%.1f\", ($after - $before) * 1e6 / $hz / $events }")
        sum[$v]=$(awk "BEGIN { print ${sum[$v]:-0} + $us }")
        printf '  round %s %-6s %8s events  %6s us/delivery  (%s; load %s)\n' "$round" "$v" "$events" "$us" "$left" "$(cut -d' ' -f1 /proc/loadavg)"
        rm -f "/tmp/pages-cost-$$-$v.sql" "/tmp/pages-cost-$$-$v.used"
    done
done
# The fetch of each batch's arrays (the same in every variant; the worker holds them in memory) is taken out.
fetch=$(awk "BEGIN { print ${sum[fetch]} / $rounds }")
floor=$(awk "BEGIN { print ${sum[floor]} / $rounds - $fetch }")
for v in rows pages direct; do
    awk "BEGIN { x = ${sum[$v]} / $rounds - $fetch; printf \"%-6s %.1f us/delivery = %.2fx the floor of %.1f us (the batches' fetch, %.1f us, taken out of each)\n\", \"$v\", x, x / $floor, $floor, $fetch }"
done
