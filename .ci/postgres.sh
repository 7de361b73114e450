#!/usr/bin/env bash
# Make sure a PostgreSQL server answers on 127.0.0.1:5432 with a database "test".
set -euo pipefail
if pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  exit 0
fi
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
ver=$(ls /etc/postgresql | sort -V | tail -1)
conf="/etc/postgresql/$ver/main"
if ! grep -q "tsmix-ci" "$conf/pg_hba.conf" 2>/dev/null; then
  { echo "# tsmix-ci: trust on loopback for the test database"
    echo "host all all 127.0.0.1/32 trust"
    echo "local all all trust"; cat "$conf/pg_hba.conf"; } > /tmp/pg_hba.conf
  cp /tmp/pg_hba.conf "$conf/pg_hba.conf"
fi
pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
for _ in $(seq 1 30); do
  pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1 && break
  sleep 1
done
psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test"
