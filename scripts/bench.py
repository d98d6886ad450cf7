#!/usr/bin/env python3
"""Helpers for scripts/bench (Python 3 standard library only).

  bench.py free-ports BASE COUNT      print COUNT ports from BASE up that can be bound on 127.0.0.1 now
  bench.py plan SCENARIO              print the scenario's workload ids (line 1) and endpoint ids (line 2)
  bench.py report DIR REPS SCENARIO...
                                      summarise the redis-benchmark --csv files (and the .cpu samples)
                                      scripts/bench left in DIR/SCENARIO/ for each scenario
  bench.py idle-rss PID PORT COUNT    open COUNT idle client connections to PORT, print PID's RSS cost
  bench.py metric PORT NAME           print the samples of metric NAME from the admin port's /metrics
  bench.py writer PORT RATE OUT       SET the 10 hot keys through PORT, RATE a second, until SIGTERM; the count
                                      of writes to OUT

The shell script owns processes, commands and the run order; this file owns what each scenario measures and
compares (SCENARIOS) and the sockets, which are clumsy in bash; bench_report.py, the report's arithmetic.
"""

import resource
import signal
import socket
import sys
import time
import urllib.request
from typing import NamedTuple

from bench_report import report

# Targets: gateway/direct at least this; gateway/twemproxy at least this.
TARGET_VS_DIRECT = {"set": 0.90, "get": 0.90, "mset30": 0.80, "mget30": 0.80, "get_p30": 0.70}
# What was measured for twemproxy/direct on this kind of machine, to tell a slow peer from a slow machine.
TWEMPROXY_REFERENCE = {"set": "0.87", "get": "0.79", "mset30": "0.54", "mget30": "0.56", "get_p30": "0.19"}
TARGET_VS_TWEMPROXY = {"set": 0.95, "get": 0.95, "mset30": 1.3, "mget30": 1.3, "get_p30": 3.0}
# Against predixy in front of the same Redis Cluster with as many worker threads: single-key commands at least
# level; multi-key and pipelined ones, where the gateway splits by slot and batches per node, well ahead.
TARGET_VS_PREDIXY = {"set": 1.0, "get": 1.0, "mset30": 1.3, "mget30": 1.3, "get_p30": 1.3}
# Targets: TLS to the gateway and TLS from it to Redis, against TLS straight to Redis.
TARGET_TLS_VS_DIRECT_TLS = {"set": 0.80, "get": 0.80, "get_p30": 0.60}


class Comparison(NamedTuple):
    """num/den ops/s (medians), with a minimum per workload."""

    num: str
    den: str
    minimum: dict
    short: str  # names the verdict in the summary
    cost: bool = False  # a target of the form "num costs at most 1 - minimum of den's ops/s"


class Peer(NamedTuple):
    """The peer proxy's own ratio to direct Redis, printed beside a reference to tell a slow peer from a busy machine."""

    peer: str
    direct: str
    reference: dict
    source: str


class Scenario(NamedTuple):
    title: str
    workloads: list
    endpoints: list  # (id, what it is); scripts/bench starts an endpoint per id
    comparisons: list
    peer: Peer = None
    p99: tuple = None  # (a, b): a's p99 must be no worse than b's
    backend_reads: tuple = None  # (a, share): at most this share of a's client reads may reach its Redis


SCENARIOS = {
    "standalone": Scenario(
        "standalone: one Redis behind each proxy",
        ["set", "get", "mset30", "mget30", "get_p30"],
        [
            ("direct", "redis-server itself"),
            ("gateway", "the gateway, single route to that Redis"),
            ("twemproxy", "twemproxy, one pool with that one server"),
        ],
        [
            Comparison("gateway", "direct", TARGET_VS_DIRECT, "dir"),
            Comparison("gateway", "twemproxy", TARGET_VS_TWEMPROXY, "twem"),
        ],
        Peer("twemproxy", "direct", TWEMPROXY_REFERENCE, "reference on 2 cores"),
        ("gateway", "twemproxy"),
    ),
    "sharded": Scenario(
        "sharded: 3 standalone Redis shards behind each proxy",
        ["mset30", "mget30"],
        [
            ("direct", "one redis-server used directly: the standalone scenario's, not one of the shards"),
            ("gw-shard3", "the gateway, sharded route, ring hash over the 3 shards"),
            ("twem-shard3", "twemproxy, ketama distribution, fnv1a_64 hash over the same 3 shards"),
        ],
        [
            Comparison("gw-shard3", "direct", {"mset30": 0.60, "mget30": 0.60}, "dir"),
            Comparison("gw-shard3", "twem-shard3", {"mset30": 1.3, "mget30": 1.3}, "twem"),
        ],
        Peer("twem-shard3", "direct", {"mset30": "0.44-0.45", "mget30": "0.44-0.45"}, "reference"),
    ),
    "double-write": Scenario(
        "double-write: SET through the gateway, written to one backend or to two",
        ["set"],
        [
            ("gateway", "the gateway, single route to one Redis (A): single-write"),
            ("gw-dw-primary", "the gateway, write resources [A, B], ack primary"),
            ("gw-dw-all", "the gateway, write resources [A, B], ack all"),
        ],
        [
            Comparison("gw-dw-primary", "gateway", {"set": 0.85}, "primary", cost=True),
            Comparison("gw-dw-all", "gateway", {"set": 0.75}, "all", cost=True),
        ],
    ),
    "resp3": Scenario(
        "resp3: the standalone workloads from RESP3 clients (redis-benchmark -3) beside RESP2 ones",
        ["set", "get", "mset30", "mget30", "get_p30"],
        [
            ("direct", "redis-server itself, RESP2 clients"),
            ("gateway", "the gateway, single route to that Redis, RESP2 clients"),
            ("direct-resp3", "the same redis-server, RESP3 clients"),
            ("gateway-resp3", "the same gateway, RESP3 clients"),
        ],
        [
            Comparison("gateway", "direct", TARGET_VS_DIRECT, "resp2"),
            Comparison("gateway-resp3", "direct-resp3", TARGET_VS_DIRECT, "resp3"),
        ],
    ),
    "tls": Scenario(
        "tls: the standalone workloads over TLS, direct and through the gateway, beside plain TCP",
        ["set", "get", "mset30", "mget30", "get_p30"],
        [
            ("direct", "redis-server itself, plain TCP"),
            ("gateway", "the gateway, single route to that Redis, plain TCP on both sides"),
            ("direct-tls", "the same redis-server on its TLS port (redis-benchmark --tls)"),
            ("gw-tls", "the gateway's TLS listener, single rediss:// route to that TLS port"),
        ],
        [
            Comparison("gw-tls", "direct-tls", TARGET_TLS_VS_DIRECT_TLS, "tls"),
            Comparison("gateway", "direct", {}, "plain"),
            # What TLS costs Redis itself, and the gateway path: context for the first ratio.
            Comparison("direct-tls", "direct", {}, "tls-cost"),
            Comparison("gw-tls", "gateway", {}, "gw-tls-cost"),
        ],
    ),
    "namespace": Scenario(
        "namespace: the gateway with a tenant key namespace (every key prefixed) against the same route without one",
        ["set", "get", "mset30", "mget30", "get_p30"],
        [
            ("gateway", "the gateway, single route to one Redis, tenant without a namespace"),
            ("gw-ns", "the gateway, the same route, tenant with the namespace ns:"),
        ],
        [
            Comparison("gw-ns", "gateway", {"set": 0.95, "get": 0.95, "mget30": 0.95}, "ns"),
        ],
    ),
    "tracking": Scenario(
        "tracking: the gateway with slow log, big-key and hot-key tracking on (its default) against the same"
        " gateway with --tracking off",
        ["set", "get", "get_p30"],
        [
            ("gateway", "the gateway, single route to one Redis, tracking on"),
            ("gw-untracked", "the gateway, the same route, --tracking off"),
        ],
        [
            Comparison("gateway", "gw-untracked", {"set": 0.97, "get": 0.97, "get_p30": 0.97}, "trk"),
        ],
    ),
    "cluster": Scenario(
        "cluster: the gateway in front of a 3-master Redis Cluster",
        ["set", "get", "mset30", "mget30", "get_p30"],
        [
            ("direct", "one redis-server used directly (not a cluster node)"),
            ("gateway", "the gateway, single route to that Redis: its standalone figure"),
            ("gw-cluster", "the gateway, redis-cluster:// route to the 3 masters"),
            ("predixy", "predixy in front of the same cluster, as many worker threads as the gateway"),
        ],
        [
            Comparison("gw-cluster", "direct", {"mset30": 0.45, "mget30": 0.45, "get_p30": 0.60}, "dir"),
            Comparison("gw-cluster", "gateway", {"set": 0.90, "get": 0.90, "get_p30": 0.90}, "gw"),
            Comparison("gw-cluster", "predixy", TARGET_VS_PREDIXY, "pdx"),
        ],
        p99=("gw-cluster", "predixy"),
    ),
    "near-cache": Scenario(
        "near-cache: GET of 10 hot keys, 1% of them written meanwhile, with and without the gateway's near cache",
        ["hot_get", "hot_get_p10"],
        [
            ("direct", "redis-server itself"),
            ("gateway", "the gateway, single route to that Redis, tenant without a near cache"),
            ("gw-near", "the gateway, the same route, tenant with a near cache of its hot keys"),
        ],
        [
            Comparison("gw-near", "gateway", {"hot_get": 1.3, "hot_get_p10": 1.3}, "nc"),
            Comparison("gw-near", "direct", {"hot_get": 1.0, "hot_get_p10": 1.0}, "dir"),
        ],
        p99=("gw-near", "direct"),
        backend_reads=("gw-near", 0.02),
    ),
}


def bindable(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_ports(base, count):
    """Ports that nothing listens on now, each with its cluster bus port (port + 10000) free too, since any of them
    may become a cluster node. Binding (not connecting) is the test: it also catches bound-but-idle."""
    found = []
    port = base
    while len(found) < count and port + 10000 < 65536:
        if port not in (6379, 6380, 6381) and bindable(port) and bindable(port + 10000):
            found.append(port)
        port += 1
    if len(found) < count:
        sys.exit(f"bench.py: fewer than {count} free ports from {base}")
    print(" ".join(map(str, found)))


def writer(port, rate, out):
    """SETs key:000000000000 to key:000000000009 (the hot keys) through PORT, RATE a second in batches every 10 ms,
    each value new, until SIGTERM; then writes how many it wrote to OUT."""
    stopped = False

    def stop(*_):
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    batch = max(1, rate // 100)
    written = 0
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        while not stopped:
            commands = []
            for i in range(written, written + batch):
                key, value = f"key:{i % 10:012d}", f"w{i}".ljust(30, "x")
                commands.append(f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n${len(value)}\r\n{value}\r\n")
            s.sendall("".join(commands).encode())
            replies = b""
            while replies.count(b"\r\n") < batch:
                chunk = s.recv(4096)
                if not chunk:
                    sys.exit("writer: connection closed")
                replies += chunk
            if replies != b"+OK\r\n" * batch:
                sys.exit(f"writer: unexpected replies {replies[:200]!r}")
            written += batch
            time.sleep(max(0.0, started + written / rate - time.monotonic()))
    with open(out, "w") as f:
        f.write(f"{written}\n")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def idle_rss(pid, port, count):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = count + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

    before = rss_kib(pid)
    conns = []
    try:
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            conns.append(s)
        # One PING each, so every connection is accepted and has a live session, as a pooled client's would be;
        # then they sit idle.
        for s in conns:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
        for s in conns:
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(64)
                if not chunk:
                    raise RuntimeError("connection closed before PONG")
                reply += chunk
            if reply != b"+PONG\r\n":
                raise RuntimeError(f"unexpected PING reply {reply!r}")
        time.sleep(1.0)
        after = rss_kib(pid)
    finally:
        for s in conns:
            s.close()
    cost = (after - before) / 1024
    print(
        f"{count} idle connections: RSS {before / 1024:.1f} MB -> {after / 1024:.1f} MB,"
        f" cost {cost:.1f} MB ({(after - before) / count:.1f} KiB each)"
    )


def plan(sid):
    scenario = SCENARIOS[sid]
    print(" ".join(scenario.workloads))
    print(" ".join(eid for eid, _ in scenario.endpoints))


def metric(port, name):
    """Prints NAME's samples, or says there are none (a counter with no labels yet has none)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = [line for line in text.splitlines() if line.startswith(name) and not line.startswith("#")]
    print("\n".join(samples) if samples else f"{name}: no samples (nothing counted)")


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "free-ports":
        free_ports(int(args[1]), int(args[2]))
    elif len(args) == 2 and args[0] == "plan" and args[1] in SCENARIOS:
        plan(args[1])
    elif len(args) >= 4 and args[0] == "report" and all(s in SCENARIOS for s in args[3:]):
        report(args[1], int(args[2]), [(sid, SCENARIOS[sid]) for sid in args[3:]])
    elif len(args) == 4 and args[0] == "idle-rss":
        idle_rss(int(args[1]), int(args[2]), int(args[3]))
    elif len(args) == 3 and args[0] == "metric":
        metric(int(args[1]), args[2])
    elif len(args) == 4 and args[0] == "writer":
        writer(int(args[1]), int(args[2]), args[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
