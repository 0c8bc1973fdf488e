#!/usr/bin/env bash
# Installs what building, testing and the demo need on a fresh Debian machine (run as root), and nothing
# that is already there. (libsystemd-dev: sd_notify for the worker; systemd: systemd-analyze for the unit tests;
# libmicrohttpd-dev: the metrics listener; libcurl4-openssl-dev: the HTTP client of webhook deliveries; libpsl-dev: the Public Suffix List, by whose registrable domains the resolver
# shares its threads; prometheus: promtool, which checks metrics and alert rules in the tests;
# curl: scrapes in the demo; faketime: runs the worker with its clock off the database's in the clock tests;
# pgbouncer: the transaction-pooler tests; patroni, etcd-server: the failover tests' Patroni cluster,
# scripts/patroni-cluster.sh; postgresql-15-pg-stat-kcache: each statement's CPU time in make bench, for Debian 12's
# PostgreSQL 15; chromium: the headless browser that renders the worker's status page in the tests.) The Swift
# toolchain itself is expected on PATH (the machine image provides it).
set -euo pipefail
packages=(libpq-dev libssl-dev libnghttp2-dev libsystemd-dev systemd postgresql postgresql-contrib tzdata openssl ca-certificates pgbouncer pkg-config util-linux nghttp2-server nghttp2-client time libmicrohttpd-dev libcurl4-openssl-dev libpsl-dev prometheus libcurl4 curl faketime patroni etcd-server postgresql-15-pg-stat-kcache chromium)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    if [ "$(id -u)" != 0 ]; then echo "install-deps: run as root (apt-get install ${missing[*]})" >&2; exit 1; fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # prometheus is installed for its promtool (the metrics tests); the server it enables is not wanted here.
    if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
        systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
    # Likewise etcd-server's own etcd and pgbouncer's own PgBouncer: the tests start theirs on loopback test ports.
    for service in etcd-server:etcd pgbouncer:pgbouncer; do
        if [[ " ${missing[*]} " == *" ${service%%:*} "* ]] && command -v systemctl >/dev/null; then
            systemctl disable --now "${service##*:}.service" >/dev/null 2>&1 || true
        fi
    done
fi
command -v swift >/dev/null || { echo "install-deps: the Swift toolchain (swift) is not on PATH" >&2; exit 1; }
