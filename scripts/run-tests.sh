#!/usr/bin/env bash
# `make test`: builds, starts a throwaway PostgreSQL, runs every test against it, and stops it again.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${PUSHIZO_TEST_PG_PORT:-55432}
pgdir=$(mktemp -d /tmp/pushizo-test-pg.XXXXXX)
cleanup() { scripts/pg-throwaway.sh stop "$pgdir" || true; rm -rf "$pgdir"; }
trap cleanup EXIT
swift build --build-tests
PUSHIZO_TEST_DATABASE_URL=$(scripts/pg-throwaway.sh start "$pgdir" "$port")
export PUSHIZO_TEST_DATABASE_URL
export PUSHIZO_TEST_MIGRATIONS_DIR=$PWD/migrations
export PUSHIZO_TEST_EXECUTABLE=$(swift build --show-bin-path)/pushizo-worker
swift test --skip-build "$@"
