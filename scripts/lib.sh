# Shared shell helpers for scripts/: installing and starting what Switchyard needs on a Debian machine.

# Installs the Debian package of each missing command, given as command:package (needs root, as on CI and the
# dev machines).
ensure_commands() {
  local missing=()
  local pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    ensure_packages "${missing[@]}"
  fi
}

# Waits until something accepts connections on 127.0.0.1:$1, for up to $2 seconds (default 10); fails, saying so,
# when nothing does.
wait_for_port() {
  local tries=$((${2:-10} * 10))
  for _ in $(seq "$tries"); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# Waits until process $1, named $2, listens on 127.0.0.1:$3 (for up to 30 s). When it exits first or never
# listens, prints the end of its log $4 and the hint $5, and fails.
wait_started() {
  local pid=$1 name=$2 port=$3 log=$4 hint=$5
  local i
  for i in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$name did not start (nothing listens on 127.0.0.1:$port). The end of $log:" >&2
  tail -n 15 "$log" | sed 's/^/  | /' >&2
  echo "hint: $hint" >&2
  return 1
}

# Installs the Python client users get today (redis-py 8, which speaks RESP3 by default), for the client tests.
ensure_python_redis() {
  python3 -c 'import redis, sys; sys.exit(int(redis.__version__.split(".")[0]) < 8)' 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore 'redis>=8,<9'
}

# Installs the Node.js client users get today (node-redis 6, which speaks RESP3 by default) under
# target/node-clients, for the client tests.
ensure_node_redis() {
  ensure_commands node:nodejs npm:npm
  local dir=target/node-clients
  node -e "process.exit(require('./$dir/node_modules/redis/package.json').version.startsWith('6.') ? 0 : 1)" \
    2>/dev/null && return 0
  mkdir -p "$dir"
  (cd "$dir" && npm install --silent --no-audit --no-fund 'redis@6' >/dev/null)
}

# Installs Debian packages that are missing.
ensure_packages() {
  local missing=()
  local pkg
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# Makes sure a Postgres answers on 127.0.0.1:5432 and exports DATABASE_URL for it (unless already set). When none
# answers: with a folder argument, initialises a private one there (trust auth, loopback only); without, starts
# (installing it if needed) the machine's Debian cluster.
ensure_postgres() {
  export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    return 0
  fi
  ensure_commands psql:postgresql-client
  if [ -n "${1:-}" ]; then
    ensure_postgres_binaries
    start_private_postgres "$1" 5432
  else
    [ -d /etc/postgresql ] && ls /etc/postgresql/*/main >/dev/null 2>&1 || ensure_packages postgresql
    start_debian_postgres
  fi
  local i
  for i in $(seq 1 50); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return 0
    sleep 0.2
  done
  echo "Postgres does not answer on 127.0.0.1:5432" >&2
  return 1
}

# Installs Postgres's server binaries (initdb, pg_ctl in /usr/lib/postgresql/*/bin) when they are missing, even
# where a Postgres already answers (a service container): the TLS tests start private clusters of their own.
ensure_postgres_binaries() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ensure_packages postgresql
}

start_debian_postgres() {
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  [ -n "$version" ] || return 0
  # Trust local TCP connections, as the test suite and quickstart connect without a password.
  local hba="/etc/postgresql/$version/main/pg_hba.conf"
  if ! grep -q "^host all all 127.0.0.1/32 trust" "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null || pg_ctlcluster "$version" main start || true
}

# start_private_postgres DIR PORT: a Postgres of our own in DIR (initialised on first use), on 127.0.0.1:PORT with
# trust auth for the user postgres. Postgres refuses to run as root, so as root it runs as the postgres user.
start_private_postgres() {
  local dir=$1 port=$2 bin
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  local -a as_owner=()
  if [ "$(id -u)" = 0 ]; then
    as_owner=(runuser -u postgres --)
    mkdir -p "$dir" && chown postgres: "$dir" && chmod 700 "$dir"
    if ! "${as_owner[@]}" test -w "$dir"; then
      # The checkout is somewhere the postgres user cannot enter (a home directory): use a folder it can.
      dir=/var/tmp/switchyard-postgres
      echo "the postgres user cannot reach $1; keeping Postgres's files in $dir instead" >&2
      mkdir -p "$dir" && chown postgres: "$dir" && chmod 700 "$dir"
    fi
  else
    mkdir -p "$dir"
  fi
  if [ ! -f "$dir/PG_VERSION" ]; then
    "${as_owner[@]}" "$bin/initdb" -D "$dir" -A trust -U postgres >"$dir.initdb.log" 2>&1
  fi
  "${as_owner[@]}" "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w \
    -o "-p $port -c listen_addresses=127.0.0.1 -k /tmp" start >/dev/null
  # For the caller's cleanup: what stops it again.
  private_postgres_stop=("${as_owner[@]}" "$bin/pg_ctl" -D "$dir" -m fast stop)
}

# A throwaway CA and a certificate for 127.0.0.1 it signs, for benchmarks over TLS: $1/ca.pem, $1/server.pem and
# $1/server.key, for Redis' TLS port and the gateway's TLS listener alike. P-256 keys (the handshakes are not what
# is measured), valid 30 days: beyond the gateway's expiry warning.
make_bench_certificates() {
  local dir=$1
  mkdir -p "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 -subj /CN=switchyard-bench-ca \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>"$dir/openssl.log"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>>"$dir/openssl.log"
  printf '%s\n' subjectAltName=IP:127.0.0.1,DNS:localhost basicConstraints=CA:FALSE \
    extendedKeyUsage=serverAuth,clientAuth >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 30 \
    -extfile "$dir/server.ext" -out "$dir/server.pem" 2>>"$dir/openssl.log"
}
