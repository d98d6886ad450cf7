//! The exposition's escaping and which tenants it writes, on the renderer alone (the gateway end to end is in
//! tests/tests/metrics.rs).

use std::time::{Duration, Instant};

use super::*;

const WINDOW: Duration = Duration::from_secs(600);

fn render(tenants: &[(&str, &TenantCounters)], now: Instant, tenant_latency: bool) -> String {
    let config = MetricsConfig {
        active_window: WINDOW,
        tenant_latency,
    };
    Metrics::default().render(tenants, None, &config, now)
}

/// One sample line as a scraper reads it, label values unescaped.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: String,
}

/// Every sample line of `text`; panics on a line a scraper would reject.
fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let name_end = line.find(['{', ' ']).expect("a sample has a name");
        let (name, mut rest) = line.split_at(name_end);
        let mut labels = Vec::new();
        if let Some(inner) = rest.strip_prefix('{') {
            rest = inner;
            while let Some(inner) = rest
                .strip_prefix(',')
                .or(Some(rest))
                .filter(|r| !r.starts_with('}'))
            {
                let (label, after) = inner.split_once("=\"").expect("label=\"value\"");
                let mut value = String::new();
                let mut chars = after.char_indices();
                let end = loop {
                    match chars.next().expect("a closing quote") {
                        (i, '"') => break i,
                        (_, '\\') => match chars.next().expect("an escape").1 {
                            'n' => value.push('\n'),
                            c @ ('\\' | '"') => value.push(c),
                            c => panic!("bad escape \\{c} in {line}"),
                        },
                        (_, '\n') => panic!("raw line feed in {line}"),
                        (_, c) => value.push(c),
                    }
                };
                labels.push((label.to_string(), value));
                rest = &after[end + 1..];
            }
            rest = rest.strip_prefix('}').expect("labels end with }");
        }
        let value = rest.strip_prefix(' ').expect("a space before the value");
        assert!(value.parse::<f64>().is_ok(), "value of {line}");
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value: value.to_string(),
        });
    }
    samples
}

#[test]
fn a_tenant_named_with_quotes_backslashes_and_line_feeds_leaves_the_exposition_readable() {
    let name = "we\"ird\\te\nnant";
    let tenant = TenantCounters::default();
    tenant.commands.add(crate::cmd::Command::Get, 3);
    tenant.connections_received.add(1);
    tenant.latency.observe(Duration::from_micros(80), 3);
    tenant
        .double_write_failures("redis://h\"ost:1")
        .fetch_add(2, Ordering::Relaxed);
    let text = render(&[(name, &tenant)], Instant::now(), true);
    let samples = parse(&text);
    let of = |metric: &str| {
        samples
            .iter()
            .find(|s| s.name == metric && s.labels.iter().any(|(l, v)| l == "tenant" && v == name))
            .unwrap_or_else(|| panic!("no {metric} of the tenant in {text}"))
    };
    assert_eq!(of("switchyard_commands_total").value, "3");
    assert_eq!(of("switchyard_command_duration_seconds_count").value, "3");
    let double_write = of("switchyard_double_write_failures_total");
    assert!(
        double_write
            .labels
            .contains(&("resource".to_string(), "redis://h\"ost:1".to_string()))
    );
}

#[test]
fn idle_tenants_are_counted_in_the_totals_only_and_come_back_when_active() {
    let (busy, idle) = (TenantCounters::default(), TenantCounters::default());
    let now = Instant::now();
    // The idle tenant was busy once, before a scrape; nothing since.
    idle.commands.add(crate::cmd::Command::Set, 5);
    idle.connections_received.add(1);
    render(&[("busy", &busy), ("idle", &idle)], now, false);
    busy.commands.add(crate::cmd::Command::Set, 2);
    busy.connections_received.add(1);
    let later = now + WINDOW + Duration::from_secs(1);
    let text = render(&[("busy", &busy), ("idle", &idle)], later, false);
    assert!(
        text.contains("switchyard_commands_total{tenant=\"busy\",command=\"set\"} 2\n"),
        "{text}"
    );
    assert!(!text.contains("tenant=\"idle\""), "{text}");
    assert!(
        text.contains("switchyard_gateway_commands_total{command=\"set\"} 7\n"),
        "{text}"
    );
    assert!(text.contains("switchyard_tenants 2\n"), "{text}");
    assert!(text.contains("switchyard_tenants_active 1\n"), "{text}");
    // Per-tenant histograms are opt-in; the gateway-wide ones are always there.
    assert!(
        !text.contains("switchyard_command_duration_seconds_count"),
        "{text}"
    );
    assert!(
        text.contains("switchyard_gateway_command_duration_seconds_count{family=\"read\"} 0\n"),
        "{text}"
    );

    // Within the window after its last move a tenant stays; an open connection keeps it for ever.
    let text = render(&[("busy", &busy)], later + WINDOW, false);
    assert!(text.contains("tenant=\"busy\""), "{text}");
    busy.connections.fetch_add(1, Ordering::Relaxed);
    let text = render(&[("busy", &busy)], later + WINDOW * 3, false);
    assert!(
        text.contains("switchyard_tenant_connections{tenant=\"busy\"} 1\n"),
        "{text}"
    );

    // Back from idle, the series returns with the whole count (counters are monotonic per series).
    idle.commands.add(crate::cmd::Command::Set, 1);
    idle.connections_received.add(1);
    let text = render(&[("idle", &idle)], later + WINDOW * 3, false);
    assert!(
        text.contains("switchyard_commands_total{tenant=\"idle\",command=\"set\"} 6\n"),
        "{text}"
    );
}

#[test]
fn the_gateway_wide_latency_is_every_workers_summed_by_family() {
    let metrics = Metrics::default();
    let (one, two) = (metrics.worker_latency(), metrics.worker_latency());
    one.observe(Family::Read, Duration::from_micros(80), 2);
    two.observe(Family::Read, Duration::from_micros(80), 3);
    two.observe(Family::Script, Duration::from_millis(2), 1);
    let config = MetricsConfig {
        active_window: WINDOW,
        tenant_latency: false,
    };
    let text = metrics.render(&[], None, &config, Instant::now());
    let name = "switchyard_gateway_command_duration_seconds";
    for line in [
        format!("{name}_count{{family=\"read\"}} 5\n"),
        format!("{name}_bucket{{family=\"read\",le=\"0.0001\"}} 5\n"),
        format!("{name}_count{{family=\"script\"}} 1\n"),
        format!("{name}_bucket{{family=\"script\",le=\"0.001\"}} 0\n"),
        format!("{name}_count{{family=\"write\"}} 0\n"),
    ] {
        assert!(text.contains(&line), "no {line} in {text}");
    }
}
