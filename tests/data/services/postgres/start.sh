#!/bin/bash
# Initialise a throw-away cluster with POSTGRES_PASSWORD and serve it on every address.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)
data=/tmp/pgdata
printf '%s\n' "${POSTGRES_PASSWORD:-postgres}" > /tmp/pwfile
"$bin/initdb" -D "$data" -U postgres --pwfile=/tmp/pwfile --auth=md5 >/dev/null
echo "host all all 0.0.0.0/0 md5" >> "$data/pg_hba.conf"
exec "$bin/postgres" -D "$data" -c listen_addresses='*' -c unix_socket_directories=/tmp
