# Shared by the control-plane benchmarks (scripts/bench-onboard, scripts/bench-fleet, scripts/bench-scale): a control
# plane on a fresh database.

# Builds the release control plane unless $binary names one already; sets $binary.
build_control_plane() {
  if [ -z "$binary" ]; then
    cargo build --release -p switchyard-control-plane --bins
    binary="${CARGO_TARGET_DIR:-target}/release/switchyard-control-plane"
  fi
}

# Starts $binary on a fresh database named $1 and a free port; sets $port, $admin, $gateway_token and
# $control_plane_work (its log directory). The caller's EXIT trap calls stop_control_plane.
start_control_plane() {
  database="$1"
  control_plane_work=$(mktemp -d -t "$database.XXXXXX")
  trap 'exit 130' INT TERM
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  psql -q "${DATABASE_URL%/*}/postgres" -c "CREATE DATABASE $database"
  admin=bench-admin-token-0123456789
  gateway_token=bench-gateway-token-0123456789
  # Tokens through the environment: a command line is visible to every user in `ps`.
  SWITCHYARD_ADMIN_TOKEN="$admin" SWITCHYARD_GATEWAY_TOKEN="$gateway_token" \
    "$binary" --listen "127.0.0.1:$port" --database-url "${DATABASE_URL%/*}/$database" --max-db-connections 20 \
    >"$control_plane_work/control-plane.log" 2>&1 &
  control_plane_pid=$!
  wait_for_port "$port" 30
}

# Stops what start_control_plane started, drops its database and removes its log directory.
stop_control_plane() {
  [ -n "${control_plane_pid:-}" ] || return 0
  kill "$control_plane_pid" 2>/dev/null || true
  wait "$control_plane_pid" 2>/dev/null || true
  psql -q "${DATABASE_URL%/*}/postgres" -c "DROP DATABASE IF EXISTS $database WITH (FORCE)" 2>/dev/null || true
  rm -rf "$control_plane_work"
}
