#!/usr/bin/env bash
# Builds the previous release's worker binary (the commit named in compat/previous-release) from this
# repository's own git history, once per machine, for the compatibility-window test: a worker of the previous
# release must keep working against the current migrations (docs/operations.md, "Upgrade: migrations first").
#   scripts/previous-release-build.sh   -> stdout: the binary's path; stderr: built / from the cache, and how long
# Exit status: 0 with the binary built or cached; 3 when the clone's history lacks the commit (a shallow clone:
# the test is then skipped, saying so); 1 on any other failure.
# The tree of that commit (`git archive`) and its debug build live outside the clone, in
# $PUSHIZO_TEST_PREVIOUS_RELEASE_CACHE (default /var/cache/pushizo-worker)/previous-<commit>; only the binary is kept
# there (bin/pushizo-worker), and a later run finds it without building. The debug build takes about 10 minutes
# on a busy 2-core machine. Two runs at once take turns on a lock in that folder.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(grep -v '^#' compat/previous-release | grep -m1 -E '^[0-9a-f]{40}$' || true)
if [ -z "$commit" ]; then
    echo "previous-release-build: compat/previous-release names no 40-hex-digit commit" >&2
    exit 1
fi
if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "previous-release-build: commit $commit (compat/previous-release) is not in this clone's history" \
        "(a shallow clone?); the previous-release compatibility test is skipped" >&2
    exit 3
fi
cache=${PUSHIZO_TEST_PREVIOUS_RELEASE_CACHE:-/var/cache/pushizo-worker}
entry=$cache/previous-$commit
mkdir -p "$entry"
exec 9>"$entry/.lock"
flock 9
binary=$entry/bin/pushizo-worker
if [ -x "$binary" ]; then
    echo "previous-release-build: $commit from the cache" >&2
    echo "$binary"
    exit 0
fi
started=$(date +%s)
rm -rf "$entry/src"
mkdir -p "$entry/src" "$entry/bin"
git archive --format=tar "$commit" | tar -x -C "$entry/src"
(cd "$entry/src" && swift build --product pushizo-worker --scratch-path "$entry/build" >"$entry/build.log" 2>&1) || {
    tail -n 40 "$entry/build.log" >&2
    echo "previous-release-build: building $commit failed (log: $entry/build.log)" >&2
    exit 1
}
cp "$(cd "$entry/src" && swift build --product pushizo-worker --scratch-path "$entry/build" --show-bin-path)/pushizo-worker" "$binary.tmp"
mv "$binary.tmp" "$binary"
# Only the binary is kept: the tree and the build products (about 150 MB) are not needed again.
rm -rf "$entry/src" "$entry/build"
echo "previous-release-build: built $commit in $(( $(date +%s) - started )) s" >&2
echo "$binary"
