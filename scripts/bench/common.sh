# Sourced by the bench scripts: a throwaway PostgreSQL with the migrations applied, APNs emulators (TLS) that
# accept the bench's team key, and an app whose APNs channel points at one. Needs $root, $bindir and $work.

# Starts PostgreSQL in $work/pg on port $1, exports PUSHIZO_DATABASE_URL, applies the migrations (of the
# directory $2, default the repository's) and writes an APNs signing key (P-256) to $work/key.p8.
bench_database() {
    PUSHIZO_DATABASE_URL=$("$root/scripts/pg-throwaway.sh" start "$work/pg" "$1")
    export PUSHIZO_DATABASE_URL
    "$bindir/pushizo-worker" migrate --migrations-dir "${2:-$root/migrations}" 2>/dev/null
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.p8" 2>/dev/null
}

# Starts an emulator named $1 in the background (its pid in $emulator_pid, its log $work/$1.log) and waits
# until it has written its port to $work/$1.port. Further arguments go to the emulator.
bench_emulator() {
    local name=$1
    shift
    "$bindir/pushizo-worker" emulator --emulator-listen 127.0.0.1:0 --emulator-tls-dir "$work/tls" \
        --emulator-apns-keys "BENCHTEAM1:BENCHKEY01:$work/key.p8" --emulator-ready-file "$work/$name.port" \
        --log-level warning "$@" 2>"$work/$name.log" &
    emulator_pid=$!
    for _ in $(seq 1 100); do [ -s "$work/$name.port" ] && break; sleep 0.1; done
}

# Creates the app $1 (default language en) with an APNs channel (token auth, the key above) whose endpoint is
# the emulator named $2.
bench_apns_app() {
    psql "$PUSHIZO_DATABASE_URL" -q -v ON_ERROR_STOP=1 -v app="$1" -v key="$(cat "$work/key.p8")" \
        -v endpoint="https://localhost:$(cat "$work/$2.port")" <<'SQL'
INSERT INTO apps (id, default_language) VALUES (:'app', 'en');
INSERT INTO app_channels (app_id, provider, settings, endpoint)
VALUES (:'app', 'apns',
        jsonb_build_object('team_id', 'BENCHTEAM1', 'key_id', 'BENCHKEY01', 'private_key', :'key', 'topic', 'dev.pushizo.bench'),
        :'endpoint');
SQL
}

# CPU ticks (user + sys, 1/CLK_TCK s each) of process $1.
process_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# CPU ticks of the whole PostgreSQL server in $work/pg: the postmaster, its live children and the children it
# has reaped (ended backends).
pg_ticks() {
    local postmaster total child
    postmaster=$(head -n 1 "$work/pg/data/postmaster.pid")
    total=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$postmaster/stat")
    for child in $(pgrep -P "$postmaster"); do
        total=$((total + $(process_ticks "$child" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
