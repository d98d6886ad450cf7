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
compares (SCENARIOS), the arithmetic and the sockets, which are clumsy in bash.
"""

import csv
import os
import resource
import signal
import socket
import statistics
import sys
import time
import urllib.request
from typing import NamedTuple

# Workload ids name the result files; scripts/bench defines the commands.
WORKLOAD_LABELS = {
    "set": "SET",
    "get": "GET",
    "mset30": "MSET30",
    "mget30": "MGET30",
    "get_p30": "GET -P30",
    "hot_get": "GET hot10",
    "hot_get_p10": "GET hot10 -P10",
}

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


def read_run(path):
    """One redis-benchmark --csv file -> (ops/s, p50 ms, p99 ms), or None if the run failed."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return None
    if len(rows) != 1:
        return None
    row = rows[0]
    try:
        return float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"])
    except (KeyError, ValueError):
        return None


class Cpu(NamedTuple):
    """CPU time per request of one run, in microseconds, and how busy the machine's CPUs were."""

    proxy_user: float
    proxy_system: float
    redis: float
    benchmark: float
    busy: float  # the three together, as a share of every CPU's time over the run

    @property
    def total(self):
        return self.proxy_user + self.proxy_system + self.redis + self.benchmark


def read_cpu(path):
    """One run's .cpu file (requests, then the samples scripts/bench took before and after) -> Cpu, or None."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
        requests = int(lines[0])
        before, after = ([float(x) for x in line.split()] for line in lines[1:3])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    wall = after[0] - before[0]
    if requests <= 0 or wall <= 0:
        return None
    tick = 1e6 / os.sysconf("SC_CLK_TCK")
    proxy_user, proxy_system, redis, bench_user, bench_system = (
        (a - b) * tick / requests for a, b in zip(after[1:], before[1:])
    )
    cpu = Cpu(proxy_user, proxy_system, redis, bench_user + bench_system, 0.0)
    return cpu._replace(busy=cpu.total * requests / 1e6 / (wall * (os.cpu_count() or 1)))


def fmt_ops(v):
    return "n/a" if v is None else f"{v:,.0f}"


def fmt_ms(v):
    return "n/a" if v is None else f"{v:.3f}"


def fmt_ratio(v):
    return "n/a" if v is None else f"{v:.2f}"


def ratio(a, b):
    return None if a is None or not b else a / b


def median_or_none(values):
    return statistics.median(values) if values else None


def load_runs(directory, scenario, reps, failures):
    """{workload: {endpoint: [per-rep result or None]}}, and the same with the runs' Cpu (None where a run failed);
    endpoints with only .skipped files get an empty list."""
    runs, cpu = {}, {}
    for wid in scenario.workloads:
        runs[wid], cpu[wid] = {}, {}
        for eid, _ in scenario.endpoints:
            per_rep, cpu_per_rep = [], []
            for rep in range(1, reps + 1):
                base = os.path.join(directory, f"{wid}.{eid}.{rep}")
                if os.path.exists(base + ".skipped"):
                    continue
                result = read_run(base + ".csv")
                if result is None:
                    failures.append((f"{WORKLOAD_LABELS[wid]} {eid} rep {rep}", base))
                per_rep.append(result)
                cpu_per_rep.append(read_cpu(base + ".cpu") if result else None)
            runs[wid][eid], cpu[wid][eid] = per_rep, cpu_per_rep
    return runs, cpu


def describe_ratio(c, wid, value):
    """The ratio and its target, as a cost of den's ops/s when the target is one."""
    if wid not in c.minimum:
        return f"{fmt_ratio(value)}  (no target)"
    if c.cost:
        cost = "n/a" if value is None else f"{(1 - value) * 100:.1f}%"
        return f"{fmt_ratio(value)}  cost {cost}, target <= {(1 - c.minimum[wid]) * 100:.0f}%"
    return f"{fmt_ratio(value)}  target >= {c.minimum[wid]:.2f}"


def report_workload(scenario, wid, runs):
    """Prints one workload's block; returns the endpoints' medians (ops/s, p50, p99)."""
    print(f"\n== {WORKLOAD_LABELS[wid]}")
    width = max(len(eid) for eid, _ in scenario.endpoints)
    print(f"   {'endpoint':<{width}} {'ops/s':>10} {'p50 ms':>8} {'p99 ms':>8}   ops/s per rep")
    medians = {}
    for eid, _ in scenario.endpoints:
        ok = [r for r in runs[eid] if r is not None]
        if not runs[eid]:
            medians[eid] = (None, None, None)
            print(f"   {eid:<{width}} {'n/a':>10} {'n/a':>8} {'n/a':>8}   (not run)")
            continue
        m = tuple(median_or_none([r[i] for r in ok]) for i in range(3))
        medians[eid] = m
        reps_text = " ".join("FAILED" if r is None else f"{r[0]:,.0f}" for r in runs[eid])
        print(f"   {eid:<{width}} {fmt_ops(m[0]):>10} {fmt_ms(m[1]):>8} {fmt_ms(m[2]):>8}   {reps_text}")

    # Ratio of medians is the headline; the median of same-rep ratios is shown beside it because runs of one rep
    # are adjacent in time and so share the machine's noise.
    name_width = max(len(f"{c.num}/{c.den}") for c in scenario.comparisons)
    for c in scenario.comparisons:
        headline = ratio(medians[c.num][0], medians[c.den][0])
        paired = [
            n[0] / d[0] for n, d in zip(runs[c.num], runs[c.den]) if n is not None and d is not None and d[0]
        ]
        detail = ""
        if paired:
            detail = (
                f"  (same-rep ratios: median {statistics.median(paired):.2f},"
                f" range {min(paired):.2f}-{max(paired):.2f})"
            )
        print(f"   {c.num + '/' + c.den:<{name_width}}  {describe_ratio(c, wid, headline)}{detail}")
    if scenario.peer is not None:
        p = scenario.peer
        value = ratio(medians[p.peer][0], medians[p.direct][0])
        if value is not None:
            print(f"   {p.peer}/{p.direct}  {value:.2f}  ({p.source}: {p.reference[wid]})")
    return medians


def report_cpu(scenario, cpu):
    """Prints where one workload's CPU went, per endpoint (medians over the reps), and for each comparison the
    ratio the two endpoints would reach on a machine that is CPU-bound and equally busy for both: the inverse
    ratio of their total CPU per request. Unlike ops/s, CPU per request moves little with where the scheduler
    puts the processes, so it tells a costlier data path from an unlucky run."""
    width = max(len(eid) for eid, _ in scenario.endpoints)
    print(f"   {'CPU µs/request':<{width}} {'proxy usr+sys':>14} {'Redis':>6} {'bench':>6} {'total':>6} {'busy':>5}")
    totals = {}
    for eid, _ in scenario.endpoints:
        samples = [c for c in cpu[eid] if c is not None]
        if not samples:
            continue
        m = Cpu(*(statistics.median(c[i] for c in samples) for i in range(len(Cpu._fields))))
        totals[eid] = statistics.median(c.total for c in samples)
        proxy = "-" if m.proxy_user + m.proxy_system == 0 else f"{m.proxy_user:.1f}+{m.proxy_system:.1f}"
        print(
            f"   {eid:<{width}} {proxy:>14} {m.redis:>6.1f} {m.benchmark:>6.1f} {totals[eid]:>6.1f}"
            f" {m.busy * 100:>4.0f}%"
        )
    for c in scenario.comparisons:
        value = ratio(totals.get(c.den), totals.get(c.num))
        if value is not None:
            print(f"   {c.num}/{c.den} at equal CPU use: {value:.2f}")


def report_summary(scenario, summary):
    ids = [eid for eid, _ in scenario.endpoints]
    col = max(10, *(len(eid) for eid in ids))
    ratio_names = [f"{c.num}/{c.den}" for c in scenario.comparisons]
    lat = "/".join(ids)
    lat_width = max(20, len(lat) + 4)
    header = (
        f"{'workload':<9} "
        + " ".join(f"{eid:>{col}}" for eid in ids)
        + "  "
        + " ".join(f"{name:>{max(6, len(name))}}" for name in ratio_names)
        + f"  {'p50 ' + lat:>{lat_width}}  {'p99 ' + lat:>{lat_width}}  targets"
    )
    print(f"\n== Summary, {scenario.title.split(':')[0]} (medians; ops/s, p50/p99 in ms)")
    print(header)
    print("-" * len(header))
    for wid, (medians, failed) in summary.items():
        ops = [
            "FAILED" if failed[eid] and medians[eid][0] is None else fmt_ops(medians[eid][0]) for eid in ids
        ]
        ratios, verdicts = [], []
        for c, name in zip(scenario.comparisons, ratio_names):
            value = ratio(medians[c.num][0], medians[c.den][0])
            ratios.append(f"{fmt_ratio(value):>{max(6, len(name))}}")
            if wid in c.minimum:
                verdicts.append(verdict(value, c.minimum[wid], c.short + (" cost" if c.cost else "")))
        if scenario.p99 is not None:
            a, b = (medians[eid][2] for eid in scenario.p99)
            if a is not None and b is not None:
                verdicts.append("p99 ok" if a <= b else "p99 MISS")
        verdicts += [f"{eid}: {n} run{'s' if n > 1 else ''} FAILED" for eid, n in failed.items() if n]
        p50 = "/".join(fmt_ms(medians[eid][1]) for eid in ids)
        p99 = "/".join(fmt_ms(medians[eid][2]) for eid in ids)
        print(
            f"{WORKLOAD_LABELS[wid]:<9} "
            + " ".join(f"{o:>{col}}" for o in ops)
            + "  "
            + " ".join(ratios)
            + f"  {p50:>{lat_width}}  {p99:>{lat_width}}  {' '.join(verdicts)}"
        )


def read_backend_reads(base):
    """(client reads, reads that reached Redis, writes) of one near-cache run, or None."""
    try:
        with open(base + ".cpu") as f:
            reads = int(f.readline())
        with open(base + ".reads") as f:
            before, after = (int(line) for line in f.read().split())
        with open(base + ".writes") as f:
            writes = int(f.read())
    except (FileNotFoundError, ValueError):
        return None
    return reads, after - before, writes


def report_backend_reads(scenario, directory, reps):
    """Prints, per endpoint, the share of the client's reads that reached Redis (its GET count over the run, the
    near cache's fills included) and the write mix, medians over the reps; then the target."""
    print("\n== Reads that reached Redis (its GETs over the run / the client's GETs), and the write mix")
    width = max(len(eid) for eid, _ in scenario.endpoints)
    target, maximum = scenario.backend_reads
    for wid in scenario.workloads:
        for eid, _ in scenario.endpoints:
            runs = [read_backend_reads(os.path.join(directory, f"{wid}.{eid}.{rep}")) for rep in range(1, reps + 1)]
            runs = [r for r in runs if r is not None and r[0] > 0]
            if not runs:
                continue
            share = statistics.median(r[1] / r[0] for r in runs)
            mix = statistics.median(r[2] / r[0] for r in runs)
            verdict = ""
            if eid == target:
                verdict = f"  target <= {maximum * 100:.0f}%: {'ok' if share <= maximum else 'MISS'}"
            label = WORKLOAD_LABELS[wid]
            print(f"   {label:<14} {eid:<{width}} {share * 100:6.2f}% of reads, writes {mix * 100:.2f}%{verdict}")


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


def report(directory, reps, scenario_ids):
    failures = []
    for sid in scenario_ids:
        scenario = SCENARIOS[sid]
        print(f"\n=== {scenario.title}")
        for eid, what in scenario.endpoints:
            print(f"   {eid}: {what}")
        runs, cpu = load_runs(os.path.join(directory, sid), scenario, reps, failures)
        summary = {}
        for wid in scenario.workloads:
            medians = report_workload(scenario, wid, runs[wid])
            report_cpu(scenario, cpu[wid])
            failed = {eid: sum(r is None for r in runs[wid][eid]) for eid, _ in scenario.endpoints}
            summary[wid] = (medians, failed)
        if scenario.backend_reads is not None:
            report_backend_reads(scenario, os.path.join(directory, sid), reps)
        report_summary(scenario, summary)

    if failures:
        print("\nFAILED runs (redis-benchmark's first line of errors):")
        for name, base in failures:
            print(f"  {name}: {first_error_line(base)}")
        sys.exit(1)


def first_error_line(base):
    try:
        with open(base + ".err") as f:
            for line in f:
                if line.strip():
                    return line.strip()
    except FileNotFoundError:
        pass
    return "(no error output; see the run log)"


def verdict(value, target, name):
    if value is None:
        return f"{name} n/a"
    return f"{name} {'ok' if value >= target else 'MISS'}"


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
        report(args[1], int(args[2]), args[3:])
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
