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

# Makes sure a Postgres answers on 127.0.0.1:5432 and exports DATABASE_URL for it (unless already set).
ensure_postgres() {
  export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
  if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    return 0
  fi
  ensure_commands psql:postgresql-client
  [ -d /etc/postgresql ] && ls /etc/postgresql/*/main >/dev/null 2>&1 || ensure_packages postgresql
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$version" ]; then
    # Trust local TCP connections, as the test suite and quickstart connect without a password.
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    if ! grep -q "^host all all 127.0.0.1/32 trust" "$hba"; then
      sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    fi
    pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null || pg_ctlcluster "$version" main start || true
  fi
  local i
  for i in $(seq 1 50); do
    pg_isready -q -h 127.0.0.1 -p 5432 && return 0
    sleep 0.2
  done
  echo "Postgres does not answer on 127.0.0.1:5432" >&2
  return 1
}
