#!/usr/bin/env bash
# Builds Citus (the PostgreSQL extension that distributes tables across nodes) from the source kept beside the
# clone, once per machine, and installs it into PostgreSQL 15. Debian 12 does not package Citus and nothing
# outside the package registries can be fetched, so the source comes from ../shared/citus (its README: the
# v13.2.2 tarball and a patch for PostgreSQL 15.20's headers).
#   scripts/citus-build.sh   -> one line: built / installed from the cache / already installed
# Exit status: 0 when Citus is installed; 3 when the source is absent (the Citus suite is then skipped); 1 on
# any other failure.
# The built files are cached outside the clone, in $PUSHIZO_TEST_CITUS_CACHE (default /var/cache/pushizo-worker/citus)
# under the sha256 of the tarball and the patch: `make install DESTDIR=<cache>/<key>/root`, then that tree is
# copied into /. A later run with the same source copies the cached tree (or finds it already in place) without
# building. PUSHIZO_TEST_CITUS_SOURCE names another source folder (an absent one simulates a machine without it).
# Runs as root (apt-get and the copy into /usr); two runs at once take turns on a lock in the cache folder.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$(realpath -m "${PUSHIZO_TEST_CITUS_SOURCE:-$PWD/../shared/citus}")
cache=${PUSHIZO_TEST_CITUS_CACHE:-/var/cache/pushizo-worker/citus}
pg_major=15

tarball=$(ls "$source_dir"/citus-*.tar.gz 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$tarball" ]; then
    echo "citus-build: Citus source not found at $source_dir; the Citus suite is skipped" >&2
    exit 3
fi
patches=()
while IFS= read -r p; do patches+=("$p"); done < <(ls "$source_dir"/*.patch 2>/dev/null | sort)
if [ "$(id -u)" != 0 ]; then
    echo "citus-build: run as root (apt-get and the install into /usr/lib/postgresql/$pg_major)" >&2
    exit 1
fi

# The key: the sha256 of the tarball's and the patches' own sha256 sums, in that order.
key=$( (sha256sum "$tarball"; for p in "${patches[@]}"; do sha256sum "$p"; done) | awk '{print $1}' | sha256sum | cut -c1-64)
entry=$cache/$key
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# Whether every file of the cached tree is already in / with the same bytes.
installed() {
    local file
    while IFS= read -r -d '' file; do
        cmp -s "$entry/root/$file" "/$file" || return 1
    done < <(cd "$entry/root" && find . -type f -print0)
}

install_tree() {
    # Each file is written beside its place and renamed over it: `install` and `cp` rewrite an existing file in
    # place, and a running PostgreSQL has the old citus.so mapped. Root's owner, the built modes.
    (cd "$entry/root" && find . -type f -print0 | while IFS= read -r -d '' file; do
        target=/${file#./}
        install -D -m "$(stat -c %a "$file")" "$file" "$target.pushizo-new"
        mv -f "$target.pushizo-new" "$target"
    done)
}

apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    # The package lists of a fresh image may be empty: one update, then the install again.
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}

started=$SECONDS
if [ -f "$entry/complete" ]; then
    if installed; then
        echo "citus-build: Citus from $(basename "$tarball") already installed (cache $entry)"
        exit 0
    fi
    install_tree
    echo "citus-build: Citus from $(basename "$tarball") installed from the cache $entry in $((SECONDS - started)) s"
    exit 0
fi

apt_install build-essential "postgresql-$pg_major" "postgresql-server-dev-$pg_major" libkrb5-dev liblz4-dev \
    libzstd-dev libcurl4-openssl-dev
work=$(mktemp -d /tmp/pushizo-citus-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
log=$work/build.log
fail() { echo "citus-build: $1 failed; the last lines of the log:" >&2; tail -n 30 "$log" >&2; exit 1; }
# Extracted and built in a temporary folder: the source folder may be read-only.
tar xzf "$tarball" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'citus-*' | head -n 1)
for p in "${patches[@]}"; do (cd "$src" && patch -p1 <"$p") >>"$log" 2>&1 || fail "patch $(basename "$p")"; done
pg_config=/usr/lib/postgresql/$pg_major/bin/pg_config
# with_llvm=no: no LLVM bitcode for JIT inlining (it doubles the build time and the tests never JIT).
(cd "$src" && ./configure PG_CONFIG="$pg_config") >>"$log" 2>&1 || fail configure
(cd "$src" && make -j2 with_llvm=no) >>"$log" 2>&1 || fail make
rm -rf "$entry"
mkdir -p "$entry"
(cd "$src" && make install DESTDIR="$work/root" with_llvm=no) >>"$log" 2>&1 || fail "make install"
cp "$log" "$entry/build.log"
mv "$work/root" "$entry/root"
# Marked complete last, so a build cut short is never taken for a cached one.
touch "$entry/complete"
install_tree
echo "citus-build: built Citus from $(basename "$tarball") in $((SECONDS - started)) s, cached in $entry, installed"
