#!/usr/bin/env bash
# Start the local Postgres and Redis the integration tests use, if they are not already running.
# The start commands are this machine's own (see the env notes); elsewhere, start them your way.
set -u

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! port_open 5432; then
  echo "ensure-services: starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
fi
if ! port_open 6379; then
  echo "ensure-services: starting Redis"
  if command -v redis-server >/dev/null 2>&1; then
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  fi
fi
for _ in $(seq 1 30); do
  if port_open 5432 && port_open 6379; then exit 0; fi
  sleep 1
done
echo "ensure-services: PostgreSQL (5432) or Redis (6379) is not reachable; integration tests will say so" >&2
exit 0
