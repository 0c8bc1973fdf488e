#!/usr/bin/env bash
# `make test`: builds, starts a throwaway PostgreSQL (and a Citus cluster when Citus's source is beside the clone),
# runs every test against it, and stops it again.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${PUSHIZO_TEST_PG_PORT:-55432}
# The Citus cluster listens on PORT+5 (coordinator) to PORT+8 (a third worker node, for a rebalance); PORT+1 is
# left to a demo beside the tests (the defaults are 55432 and 55433).
citus_port=${PUSHIZO_TEST_CITUS_PORT:-$((port + 5))}
pgdir=$(mktemp -d /tmp/pushizo-test-pg.XXXXXX)
citusdir=$(mktemp -d /tmp/pushizo-test-citus.XXXXXX)
# On a failed run the servers' logs are kept under var/test-logs/<UTC time>/ (PostgreSQL's, and each Citus node's):
# a failure inside the cluster (a coordinator's connection to a worker node, say) is written only there, and the
# directories go with the cleanup.
cleanup() {
    local rc=$? kept
    scripts/pg-throwaway.sh stop "$pgdir" || true
    scripts/citus-cluster.sh stop "$citusdir" || true
    if [ "$rc" -ne 0 ]; then
        kept=var/test-logs/$(date -u +%Y%m%dT%H%M%SZ)
        mkdir -p "$kept"
        cp "$pgdir/postgres.log" "$kept/postgres.log" 2>/dev/null || true
        for node in "$citusdir"/*/; do
            [ -f "$node/postgres.log" ] && cp "$node/postgres.log" "$kept/citus-$(basename "$node").log"
        done
        echo "==> the servers' logs of this failed run: $kept/" >&2
    fi
    rm -rf "$pgdir" "$citusdir"
}
trap cleanup EXIT
swift build --build-tests
# Citus, for the Citus suites, when its source is beside the clone (../shared/citus, or PUSHIZO_TEST_CITUS_SOURCE):
# built once per machine and cached outside the clone, then a coordinator and two worker nodes. Without the
# source (citus-build.sh exits 3 and says so) nothing is exported and those suites are skipped; with the source, a
# failed build stops the run rather than skipping them unseen. Built before any server starts: the build's
# apt-get may bring PostgreSQL 15's packages to a newer minor release, and a server started from the older one
# then fails to load its own libraries (plpgsql.so: undefined symbol).
citus=0
scripts/citus-build.sh || citus=$?
if [ "$citus" -ne 0 ] && [ "$citus" -ne 3 ]; then
    exit "$citus"
fi
# The previous release's worker binary (compat/previous-release), for the compatibility-window suite: built from
# this clone's git history once per machine and cached outside the clone (a debug build; the first one takes
# minutes, later runs find it cached). A clone whose history lacks the commit (shallow) skips that suite, as the
# script says; a failed build stops the run rather than skipping it unseen.
previous=0
previous_worker=$(scripts/previous-release-build.sh) || previous=$?
if [ "$previous" -eq 0 ]; then
    export PUSHIZO_TEST_PREVIOUS_WORKER=$previous_worker
elif [ "$previous" -ne 3 ]; then
    exit "$previous"
fi
PUSHIZO_TEST_DATABASE_URL=$(scripts/pg-throwaway.sh start "$pgdir" "$port")
export PUSHIZO_TEST_DATABASE_URL
if [ "$citus" -eq 0 ]; then
    PUSHIZO_TEST_CITUS_URL=$(scripts/citus-cluster.sh start "$citusdir" "$citus_port")
    # The worker nodes' connection strings, comma-separated (each is key/value pairs without a comma).
    PUSHIZO_TEST_CITUS_WORKER_URLS=$(scripts/citus-cluster.sh urls "$citusdir" | tail -n +2 | paste -sd,)
    export PUSHIZO_TEST_CITUS_URL PUSHIZO_TEST_CITUS_WORKER_URLS
fi
export PUSHIZO_TEST_MIGRATIONS_DIR=$PWD/migrations
export PUSHIZO_TEST_EXECUTABLE=$(swift build --show-bin-path)/pushizo-worker
if [ $# -gt 0 ]; then
    swift test --skip-build "$@"
    exit
fi
# Three runs: the socket-level HTTP/2 and libpq tests first, on an otherwise idle machine, then everything else,
# then the suites that measure a rate across worker processes (and the tenant-isolation suite, below). Run together, the end-to-end suites (which start
# worker, emulator and fleet processes by the dozen) leave the socket tests' peers without CPU on a 2-core
# machine, and their request deadlines then fire: a failure of the machine's capacity, not of the code. Likewise
# a per-app rate limit only binds when the fleet can send faster than the limit, which four starved workers
# cannot. Each run is still parallel inside.
early='^(HTTP2Tests|PostgresTests)\.'
# The last run also takes the tenant-isolation suite, which drains a 20,000-device broadcast and holds thousands of
# requests at slow emulators (load that starved the second run's end-to-end suites past their hang guards), and the
# memory-bound suite, whose 4,000 large rows behind a slow provider need most of the machine to drain within its
# guard.
# So does the failover suite: four 20,000-device broadcasts, each through a killed primary and a promoted
# standby (its own PostgreSQL pair or Patroni cluster, on free loopback ports below the ephemeral range).
# And the previous release's worker draining a broadcast against the current migrations.
rates='^WorkerTests\.(ThrottleFleetTests|TenantIsolationEndToEndTests|MemoryBoundEndToEndTests|FailoverEndToEndTests|PreviousReleaseEndToEndTests)/'
# Inside each run, at most this many tests at once (Swift Testing's SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH;
# unbounded by default). Started all at once, the hundreds of tests of the second run (dozens of which start worker
# and emulator processes) shared two busy cores so thinly that their hang guards fired: with the cores busy with
# other work, every test started at once took 250-280 s and about 40 failed; six at a time, all passed in 160 s.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${PUSHIZO_TEST_PARALLEL:-6}
# All three run even when one fails, so one failure never hides the rest of the suite; the exit status is the
# first failure's.
status=0
summary=()
run() {
    local name=$1 rc=0
    shift
    swift test --skip-build "$@" || rc=$?
    if [ "$status" -eq 0 ]; then status=$rc; fi
    if [ "$rc" -eq 0 ]; then summary+=("$name: passed"); else summary+=("$name: FAILED (exit status $rc)"); fi
}
run "HTTP/2 and libpq sockets" --filter "$early"
run "everything else" --skip "$early" --skip "$rates"
run "rates across worker processes, tenant isolation, memory bound, failover, previous release" --filter "$rates"
# One line for the three runs, so the outcome needs no scrolling back.
echo "==> test runs: ${summary[0]}; ${summary[1]}; ${summary[2]}"
exit "$status"
