# The processes of scripts/bench: starting each kind (Redis, the gateway, twemproxy, predixy) on a free port, and
# waiting until it answers. Sourced by scripts/bench, whose globals (work, the port list, the maps of names to
# ports, pids, logs and backends) they fill.

# Polls PING until the server answers; fails early if its process has died.
wait_ready() {
  local name=$1 port=$2 pid=$3 log=$4 i
  for i in $(seq 1 300); do
    [ "$(redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null)" = PONG ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$name exited during startup; its log:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$name did not answer PING on port $port within 30 s; its log:" >&2
  cat "$log" >&2
  exit 1
}

# Records a process just started in the background ($!) and waits until it answers.
started() {
  local name=$1 port=$2 pid=$3
  names+=("$name")
  pids+=("$pid")
  port_of[$name]=$port
  pid_of[$name]=$pid
  pid_at_port[$port]=$pid
  log_of[$name]="$work/$name.log"
  wait_ready "$name" "$port" "$pid" "$work/$name.log"
}

# start_redis NAME [redis-server options...]
start_redis() {
  local name=$1 port
  shift
  take_port port
  "${pin_server[@]}" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    --logfile "$work/$name.log" --daemonize no "$@" &
  started "$name" "$port" $!
  backends_of[$name]=$port
  copies_of[$name]=1
}

# start_gateway NAME ROUTE [admin] [tls] [namespace] [untracked] [near]: a gateway with one tenant (no password)
# whose route is the JSON ROUTE, with an admin port for /metrics if asked, with a TLS listener if asked (the
# endpoint is then that listener; the plain one stays, for the readiness check), with the key namespace `ns:` if
# asked (the endpoint's keys are then stored with that prefix: prefix_of), with --tracking off if asked, and with a
# 64 MB near cache of the tenant's hot keys if asked.
start_gateway() {
  local name=$1 route=$2 port admin tls_port="" option policies=""
  shift 2
  take_port port
  if [[ " $* " == *" namespace "* ]]; then
    policies+=',"namespace":"ns:"'
    prefix_of[$name]="ns:"
  fi
  [[ " $* " != *" near "* ]] || policies+=',"near_cache":{"max_bytes":67108864,"keys":"hot"}'
  echo "{\"tenants\":[{\"name\":\"bench\",\"passwords\":[],\"route\":$route$policies}]}" >"$work/$name.routes.json"
  local -a args=(--listen "127.0.0.1:$port" --routes "$work/$name.routes.json")
  [ -z "$workers" ] || args+=(--workers "$workers")
  for option in "$@"; do
    case "$option" in
      admin)
        take_port admin
        args+=(--admin-listen "127.0.0.1:$admin")
        admin_of[$name]=$admin
        ;;
      tls)
        take_port tls_port
        args+=(--tls-listen "127.0.0.1:$tls_port" --tls-cert "$work/tls/server.pem" --tls-key "$work/tls/server.key")
        ;;
      namespace | near) ;;
      untracked) args+=(--tracking off) ;;
    esac
  done
  RUST_LOG="${RUST_LOG:-warn}" "${pin_server[@]}" "$gateway_bin" "${args[@]}" >"$work/$name.log" 2>&1 &
  started "$name" "$port" $!
  if [ -n "$tls_port" ]; then
    port_of[$name]=$tls_port
    tls_of[$name]=1
  fi
}

# redis-cli (or redis-benchmark) options to reach ENDPOINT: its port, and TLS with the bench CA when it speaks TLS.
endpoint_options() {
  local endpoint=$1
  echo -n "-h 127.0.0.1 -p ${port_of[$endpoint]}"
  [ -z "${tls_of[$endpoint]:-}" ] || echo -n " --tls --cacert $work/tls/ca.pem"
}

# start_twemproxy NAME REDIS_PORT...: one pool over those servers. ketama over fnv1a_64 is twemproxy's usual
# sharded setup; with one server it is a plain pass-through. server_connections: 1 is its default and, like the
# gateway, pipelines every client over one backend connection.
start_twemproxy() {
  local name=$1 port stats p
  shift
  take_port port
  take_port stats
  {
    cat <<YAML
bench:
  listen: 127.0.0.1:$port
  redis: true
  hash: fnv1a_64
  distribution: ketama
  timeout: 2000
  preconnect: true
  auto_eject_hosts: false
  server_connections: 1
  servers:
YAML
    for p in "$@"; do echo "   - 127.0.0.1:$p:1"; done
  } >"$work/$name.yml"
  "${pin_server[@]}" nutcracker -c "$work/$name.yml" -s "$stats" -a 127.0.0.1 -p "$work/$name.pid" \
    -o "$work/$name.log" &
  started "$name" "$port" $!
  backends_of[$name]="$*"
  copies_of[$name]=1
}

# start_predixy NAME NODE_PORT...: predixy in front of the Redis Cluster of those masters, with the gateways'
# worker count. Its default timeouts and one connection per node per worker thread, as it runs out of the box.
start_predixy() {
  local name=$1 port p
  shift
  take_port port
  {
    echo "Bind 127.0.0.1:$port"
    echo "WorkerThreads $gateway_workers"
    echo "Authority {"
    echo "  Auth {"
    echo "    Mode admin"
    echo "  }"
    echo "}"
    echo "ClusterServerPool {"
    echo "  Servers {"
    for p in "$@"; do echo "    + 127.0.0.1:$p"; done
    echo "  }"
    echo "}"
  } >"$work/$name.conf"
  "${pin_server[@]}" "$predixy_bin" "$work/$name.conf" >"$work/$name.log" 2>&1 &
  started "$name" "$port" $!
  backends_of[$name]="$*"
  copies_of[$name]=1
}
