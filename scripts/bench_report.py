"""The report of scripts/bench (Python 3 standard library only): each scenario's medians, ratios against their
targets, CPU per request and the share of reads that reached Redis, from the files scripts/bench left (see
bench.py, which holds the scenarios and calls `report`)."""

import csv
import os
import statistics
import sys
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


def report(directory, reps, scenarios):
    """Reports on each (id, Scenario) of `scenarios` from DIR/id/; exits 1 if any run failed."""
    failures = []
    for sid, scenario in scenarios:
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
