//! The monitoring shipped in `examples/monitoring/` against the real thing: after traffic through a real gateway
//! following a real control plane (HTTPS, a double-written tenant, a migration backfilled), every metric a
//! Grafana dashboard or a Prometheus alert rule queries is in the `/metrics` of one of them; the rules pass
//! `promtool check rules`; and every metric either binary writes is documented.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Gateway, Pki, RawClient, RedisServer};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn monitoring() -> PathBuf {
    workspace().join("examples/monitoring")
}

/// PromQL words that are neither metrics nor functions.
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "bool", "offset", "inf", "nan", "atan2",
];
/// PromQL's aggregation operators: their `by (...)` may come before their parentheses.
const AGGREGATIONS: [&str; 12] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
/// PromQL words followed by a list of label names in parentheses.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The end (exclusive) of the bracketed part that opens at `start` (`open` there), skipping quoted strings.
fn skip_group(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = skip_string(chars, i) - 1,
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

/// The end (exclusive) of the quoted string that opens at `start`.
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() && chars[i] != quote {
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    i + 1
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names a PromQL expression (or a Grafana `label_values(metric{...}, label)` query) reads: its
/// identifiers outside label matchers, strings, ranges and label lists, that are not functions, keywords or
/// Grafana variables.
fn metric_names(expr: &str) -> Vec<String> {
    let expr = match expr.trim().strip_prefix("label_values(") {
        Some(inner) => inner.rsplit_once(',').map_or(inner, |(metric, _)| metric),
        None => expr,
    };
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&chars, i);
        } else if c == '{' {
            i = skip_group(&chars, i, '{', '}');
        } else if c == '[' {
            i = skip_group(&chars, i, '[', ']');
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A Grafana variable ($job, ${job}), or a number or duration (0.99, 1e3, 5m).
            i += 1;
            while i < chars.len() && (is_name_char(chars[i]) || matches!(chars[i], '.' | '{' | '}'))
            {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && is_name_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let call = chars.get(next) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) {
                if call {
                    i = skip_group(&chars, next, '(', ')');
                }
            } else if !call
                && !KEYWORDS.contains(&word.as_str())
                && !AGGREGATIONS.contains(&word.as_str())
            {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn the_tokenizer_finds_metrics_only() {
    let expr = r#"histogram_quantile(0.99, sum by (le, instance) (rate(a_bucket{job=~"$job",x="b{c}"}[$__rate_interval])))
        / on (instance) group_left (version) b_total offset 5m > bool 1e3 and c:rule or vector(0)
        - scalar(max(d{e="f"})) * ${factor} unless time() - g"#;
    assert_eq!(
        metric_names(expr),
        ["a_bucket", "b_total", "c:rule", "d", "g"]
    );
    assert_eq!(
        metric_names(r#"label_values(switchyard_build_info{job=~"$job"}, instance)"#),
        ["switchyard_build_info"]
    );
}

/// Every string under a key `expr` (panel targets) and every templating query of `dashboard`.
fn dashboard_queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                match (key.as_str(), field) {
                    ("expr", Value::String(expr)) => out.push(expr.clone()),
                    ("query", Value::Object(query)) => {
                        if let Some(Value::String(expr)) = query.get("query") {
                            out.push(expr.clone());
                        }
                    }
                    _ => dashboard_queries(field, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| dashboard_queries(item, out)),
        _ => {}
    }
}

/// The `expr:` of every rule in a rules file (each written on one line, as the shipped file does).
fn rule_queries(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("expr:"))
        .map(|expr| {
            let expr = expr.trim();
            assert!(
                !expr.is_empty() && !expr.starts_with(['|', '>']),
                "write each expr on one line: {expr}"
            );
            expr.to_string()
        })
        .collect()
}

/// The names of the samples in an exposition (a histogram's `_bucket`, `_sum` and `_count` included).
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// The metric families an exposition declares (`# TYPE name kind`).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// Whether `doc` names `metric` as a whole word.
fn documents(doc: &str, metric: &str) -> bool {
    doc.match_indices(metric).any(|(at, _)| {
        let before = doc[..at].chars().next_back();
        let after = doc[at + metric.len()..].chars().next();
        !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
    })
}

/// A control plane over HTTPS, a gateway following it with a TLS listener and per-tenant latency, a tenant that
/// double-writes, one whose migration was backfilled, traffic (an unknown tenant's AUTH among it): the
/// expositions of both, as Prometheus would scrape them.
async fn scraped_fleet() -> (String, String) {
    let pki = Pki::new("monitoring");
    let [old, new, primary, secondary] = std::array::from_fn(|_| RedisServer::start());
    let cp = ControlPlane::builder().https(&pki).start();
    let secret = cp
        .create_tenant(
            "dual",
            json!({"type": "double_write", "primary": {"type": "single", "target": primary.url()},
                   "secondary": {"type": "single", "target": secondary.url()}, "ack": "primary"}),
        )
        .await;
    cp.create_tenant("moving", json!({"type": "single", "target": old.url()}))
        .await;
    let () = redis::cmd("SET")
        .arg("before-the-migration")
        .arg("1")
        .query(&mut old.client())
        .expect("write to the old deployment");
    let migration = cp
        .expect(
            "POST",
            "/v1/tenants/moving/migrations",
            Some(json!({"to": {"type": "single", "target": new.url()}})),
            201,
        )
        .await;
    let id = migration["id"].as_i64().expect("a migration id");

    let cache = pki.dir().join("snapshot.json");
    let listener = pki.server("gateway-monitoring", &["127.0.0.1", "localhost"]);
    let gateway = Gateway::builder()
        .arg("--control-plane-ca")
        .arg(pki.ca_file().display().to_string())
        .arg("--metrics-tenant-latency")
        .tls(&listener, None)
        .start_with_control_plane(&cp, &cache);
    let started = Instant::now();
    loop {
        let (status, body) = cp
            .call(
                "POST",
                &format!("/v1/tenants/moving/migrations/{id}/backfill"),
                None,
            )
            .await;
        if status == 200 {
            break;
        }
        assert!(
            status == 409 && started.elapsed() < Duration::from_secs(30),
            "backfill: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        let migration = cp
            .expect(
                "GET",
                &format!("/v1/tenants/moving/migrations/{id}"),
                None,
                200,
            )
            .await;
        if migration["state"] == "backfilled" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "never backfilled: {migration}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(format!("AUTH {secret}\r\n").as_bytes(), b"+OK\r\n");
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
    let error = client.request(&[b"INCR", b"k"]);
    assert!(
        error.starts_with(b"-ERR"),
        "{}",
        String::from_utf8_lossy(&error)
    );
    let mut unknown = RawClient::connect(gateway.port());
    unknown.send(b"AUTH nobody-has-this-password\r\n");
    let refused = unknown.read_line();
    assert!(
        refused.starts_with(b"-"),
        "{}",
        String::from_utf8_lossy(&refused)
    );

    // `dual`'s key changed behind the gateway's back: its divergence sampler finds it and hands it to the repair
    // (the series of both exist once it has).
    let () = redis::cmd("SET")
        .arg("k")
        .arg("changed on the secondary")
        .query(&mut secondary.client())
        .expect("write to the secondary");
    let sampled = Instant::now();
    while ![
        "switchyard_repair_divergence_ratio{",
        "switchyard_repair_pending_keys{",
    ]
    .iter()
    .all(|series| gateway.admin_get("/metrics").1.contains(series))
    {
        assert!(
            sampled.elapsed() < Duration::from_secs(30),
            "the divergence sampler found nothing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (status, cp_metrics) = cp.get_text("/metrics").await;
    assert_eq!(status, 200);
    let (status, gateway_metrics) = gateway.admin_get("/metrics");
    assert_eq!(status, 200);
    (gateway_metrics, cp_metrics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboards_and_alerts_query_exists() {
    let (gateway, cp) = scraped_fleet().await;
    let exposed: BTreeSet<String> = sample_names(&gateway)
        .into_iter()
        .chain(sample_names(&cp))
        .collect();

    let mut sources: Vec<(String, Vec<String>)> = Vec::new();
    let dashboards = std::fs::read_dir(monitoring().join("grafana")).expect("the dashboards");
    for entry in dashboards {
        let path = entry.expect("a dashboard").path();
        let text = std::fs::read_to_string(&path).expect("read a dashboard");
        let dashboard: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        assert!(
            dashboard["panels"]
                .as_array()
                .is_some_and(|p| !p.is_empty()),
            "{} has no panels",
            path.display()
        );
        let mut queries = Vec::new();
        dashboard_queries(&dashboard, &mut queries);
        sources.push((path.display().to_string(), queries));
    }
    assert_eq!(sources.len(), 5, "the five dashboards");
    let rules = monitoring().join("alerts.yml");
    let text = std::fs::read_to_string(&rules).expect("the alert rules");
    sources.push((rules.display().to_string(), rule_queries(&text)));

    let mut missing = Vec::new();
    let mut checked = 0;
    for (source, queries) in &sources {
        assert!(!queries.is_empty(), "{source} queries nothing");
        for query in queries {
            let names = metric_names(query);
            assert!(!names.is_empty(), "{source}: no metric in {query}");
            for name in names {
                checked += 1;
                if !exposed.contains(&name) {
                    missing.push(format!("{source}: {name} (in {query})"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "queried but in neither /metrics:\n{}\n\ngateway:\n{gateway}\ncontrol plane:\n{cp}",
        missing.join("\n")
    );
    assert!(checked > 80, "only {checked} metric references checked");

    // Every metric either binary writes is documented, with its labels, on its page.
    for (exposition, doc) in [
        (&gateway, "docs/operations.md"),
        (&cp, "docs/control-plane.md"),
    ] {
        let text = std::fs::read_to_string(workspace().join(doc)).expect("read the docs");
        assert!(families(exposition).len() > 15, "{exposition}");
        let undocumented: Vec<_> = families(exposition)
            .into_iter()
            .filter(|family| !documents(&text, family))
            .collect();
        assert!(undocumented.is_empty(), "not in {doc}: {undocumented:?}");
    }
}

/// Runs promtool with `args` on `file`: whether it succeeded and what it said; none when promtool is not
/// installed (Debian's `prometheus` package, which scripts/test installs).
fn promtool(args: &[&str], file: &std::path::Path) -> Option<(bool, String)> {
    let output = match std::process::Command::new("promtool")
        .args(args)
        .arg(file)
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "SKIPPED: promtool is not installed (apt-get install prometheus; scripts/test does), so {} was not checked",
                file.display()
            );
            return None;
        }
        Err(e) => panic!("cannot run promtool: {e}"),
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Some((output.status.success(), said))
}

/// `promtool check rules` accepts the shipped rules.
#[test]
fn the_alert_rules_pass_promtool() {
    let rules = monitoring().join("alerts.yml");
    let Some((passed, said)) = promtool(&["check", "rules"], &rules) else {
        return;
    };
    assert!(passed, "promtool check rules failed:\n{said}");
    let text = std::fs::read_to_string(&rules).expect("the alert rules");
    let alerts = text
        .lines()
        .filter(|line| line.trim().starts_with("- alert:"))
        .count();
    assert!(alerts >= 10, "{alerts} alerts in {}", rules.display());
    // Every rule was read: none was lost to an indentation slip.
    assert!(
        said.contains(&format!("SUCCESS: {alerts} rules found")),
        "{said}"
    );
}

/// The rules' own tests (`alerts.test.yml`: the double-write repair's alerts fire when and as they say).
#[test]
fn the_alert_rules_pass_their_tests() {
    if let Some((passed, said)) =
        promtool(&["test", "rules"], &monitoring().join("alerts.test.yml"))
    {
        assert!(passed, "promtool test rules failed:\n{said}");
    }
}
