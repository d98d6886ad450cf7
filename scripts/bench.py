#!/usr/bin/env python3
"""Helpers for scripts/bench (Python 3 standard library only).

  bench.py free-ports BASE COUNT      print COUNT ports from BASE up that can be bound on 127.0.0.1 now
  bench.py report DIR REPS            summarise the redis-benchmark --csv files scripts/bench left in DIR
  bench.py idle-rss PID PORT COUNT    open COUNT idle client connections to PORT, print PID's RSS cost

The shell script owns processes and the run order; this file owns the arithmetic and the sockets, which are
clumsy in bash.
"""

import csv
import os
import resource
import socket
import statistics
import sys
import time

# Workloads in run order: (id, label). The ids name the result files; scripts/bench defines the commands.
WORKLOADS = [
    ("set", "SET"),
    ("get", "GET"),
    ("mset30", "MSET30"),
    ("mget30", "MGET30"),
    ("get_p30", "GET -P30"),
]
ENDPOINTS = [("direct", "direct"), ("gateway", "gateway"), ("twemproxy", "twemproxy")]

# Targets from issue 2: gateway/direct at least this; gateway/twemproxy at least this.
TARGET_VS_DIRECT = {"set": 0.90, "get": 0.90, "mset30": 0.80, "mget30": 0.80, "get_p30": 0.70}
# What issue 2 measured for twemproxy/direct on this kind of machine, to tell a slow peer from a slow machine.
TWEMPROXY_REFERENCE = {"set": 0.87, "get": 0.79, "mset30": 0.54, "mget30": 0.56, "get_p30": 0.19}
TARGET_VS_TWEMPROXY = {"set": 0.95, "get": 0.95, "mset30": 1.3, "mget30": 1.3, "get_p30": 3.0}


def free_ports(base, count):
    """Ports that nothing listens on now. Binding (not connecting) is the test: it also catches bound-but-idle."""
    found = []
    port = base
    while len(found) < count and port < 65536:
        if port not in (6379, 6380, 6381):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                    found.append(port)
                except OSError:
                    pass
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


def report(directory, reps):
    summary = {}
    failures = []
    for wid, label in WORKLOADS:
        print(f"\n== {label}")
        runs = {}
        for eid, _ in ENDPOINTS:
            per_rep = []
            for rep in range(1, reps + 1):
                base = os.path.join(directory, f"{wid}.{eid}.{rep}")
                if os.path.exists(base + ".skipped"):
                    continue
                result = read_run(base + ".csv")
                if result is None:
                    failures.append((f"{label} {eid} rep {rep}", base))
                per_rep.append(result)
            runs[eid] = per_rep

        print(f"   {'endpoint':<10} {'ops/s':>10} {'p50 ms':>8} {'p99 ms':>8}   ops/s per rep")
        medians = {}
        for eid, name in ENDPOINTS:
            ok = [r for r in runs[eid] if r is not None]
            if not runs[eid]:
                medians[eid] = (None, None, None)
                print(f"   {name:<10} {'n/a':>10} {'n/a':>8} {'n/a':>8}   (not run)")
                continue
            m = tuple(median_or_none([r[i] for r in ok]) for i in range(3))
            medians[eid] = m
            reps_text = " ".join("FAILED" if r is None else f"{r[0]:,.0f}" for r in runs[eid])
            print(f"   {name:<10} {fmt_ops(m[0]):>10} {fmt_ms(m[1]):>8} {fmt_ms(m[2]):>8}   {reps_text}")

        # Ratio of medians is the headline; the median of same-rep ratios is shown beside it because runs of
        # one rep are adjacent in time and so share the machine's noise.
        for other, target_table in (("direct", TARGET_VS_DIRECT), ("twemproxy", TARGET_VS_TWEMPROXY)):
            headline = ratio(medians["gateway"][0], medians[other][0])
            paired = [
                g[0] / o[0]
                for g, o in zip(runs["gateway"], runs[other])
                if g is not None and o is not None and o[0]
            ]
            detail = ""
            if paired:
                detail = (
                    f"  (same-rep ratios: median {statistics.median(paired):.2f},"
                    f" range {min(paired):.2f}-{max(paired):.2f})"
                )
            print(f"   gateway/{other:<9} {fmt_ratio(headline)}  target >= {target_table[wid]:.2f}{detail}")
        peer = ratio(medians["twemproxy"][0], medians["direct"][0])
        if peer is not None:
            print(f"   twemproxy/direct  {peer:.2f}  (issue 2's reference on 2 cores: {TWEMPROXY_REFERENCE[wid]:.2f})")
        failed = {eid: sum(r is None for r in runs[eid]) for eid, _ in ENDPOINTS}
        summary[wid] = (label, medians, failed)

    print("\n== Summary (medians; ops/s, p50/p99 in ms)")
    header = (
        f"{'workload':<9} {'direct':>10} {'gateway':>10} {'twemproxy':>10}  {'gw/dir':>6} {'gw/twem':>7}"
        f"  {'p50 dir/gw/twem':>20}  {'p99 dir/gw/twem':>20}  targets"
    )
    print(header)
    print("-" * len(header))
    for wid, (label, m, failed) in summary.items():
        d, g, t = m["direct"], m["gateway"], m["twemproxy"]
        ops = {eid: "FAILED" if failed[eid] and m[eid][0] is None else fmt_ops(m[eid][0]) for eid in m}
        vs_direct = ratio(g[0], d[0])
        vs_twem = ratio(g[0], t[0])
        verdicts = [verdict(vs_direct, TARGET_VS_DIRECT[wid], "dir")]
        verdicts.append(verdict(vs_twem, TARGET_VS_TWEMPROXY[wid], "twem"))
        if g[2] is not None and t[2] is not None:
            verdicts.append("p99 ok" if g[2] <= t[2] else "p99 MISS")
        verdicts += [f"{eid}: {n} run{'s' if n > 1 else ''} FAILED" for eid, n in failed.items() if n]
        p50 = "/".join(fmt_ms(x[1]) for x in (d, g, t))
        p99 = "/".join(fmt_ms(x[2]) for x in (d, g, t))
        print(
            f"{label:<9} {ops['direct']:>10} {ops['gateway']:>10} {ops['twemproxy']:>10}  {fmt_ratio(vs_direct):>6}"
            f" {fmt_ratio(vs_twem):>7}  {p50:>20}  {p99:>20}  {' '.join(verdicts)}"
        )

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


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "free-ports":
        free_ports(int(args[1]), int(args[2]))
    elif len(args) == 3 and args[0] == "report":
        report(args[1], int(args[2]))
    elif len(args) == 4 and args[0] == "idle-rss":
        idle_rss(int(args[1]), int(args[2]), int(args[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
