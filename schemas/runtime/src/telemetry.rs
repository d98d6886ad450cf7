//! What every Switchyard binary reports about itself in the same way: its log lines (text or JSON, coloured
//! only on a terminal) and the process series of its `/metrics` (`switchyard_build_info` and the standard
//! `process_*` ones), so that one dashboard and one log pipeline serve the gateway and the control plane alike.

use std::fmt::Write as _;

/// `--log-format`: how log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event (ANSI colours only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, the event's fields, and the fields
    /// of the span it happened in (`span`), for a log pipeline to index.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<LogFormat, String> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("'{other}' is not a log format (text or json)")),
        }
    }
}

/// Installs the process' logger: to stderr, filtered by `RUST_LOG` (default `info`), in `format`. Colour codes
/// are written only when stderr is a terminal: a file, a pipe or a log collector gets plain text.
pub fn init_logging(format: LogFormat) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::EnvFilter;

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

/// Appends `switchyard_build_info{version}` and the `process_*` series of this process, read from
/// `/proc/self` (a series whose source cannot be read is left out rather than written as 0).
pub fn render_process_metrics(out: &mut String, version: &str) {
    let _ = writeln!(
        out,
        "# HELP switchyard_build_info The running build, by version (always 1).\n\
         # TYPE switchyard_build_info gauge\n\
         switchyard_build_info{{version=\"{}\"}} 1",
        version.replace('\\', "\\\\").replace('"', "\\\"")
    );
    let process = ProcessFigures::read();
    let series = [
        (
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent, in seconds.",
            process.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size, in bytes.",
            process.resident_bytes,
        ),
        (
            "process_open_fds",
            "gauge",
            "Open file descriptors.",
            process.open_fds,
        ),
        (
            "process_max_fds",
            "gauge",
            "The most file descriptors the process may open (its soft RLIMIT_NOFILE).",
            process.max_fds,
        ),
        (
            "process_start_time_seconds",
            "gauge",
            "When the process started, in seconds since the Unix epoch.",
            process.start_time_seconds,
        ),
    ];
    for (name, kind, help, value) in series {
        if let Some(value) = value {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }
}

/// The kernel's clock ticks per second in `/proc` times (`USER_HZ`): fixed at 100 in the kernel's ABI on every
/// architecture Linux exports it to user space, whatever the kernel's internal tick rate.
const USER_HZ: f64 = 100.0;

/// What `/proc/self` says of this process, each figure `None` where it cannot be read (not Linux, or a
/// `/proc` without it).
#[derive(Debug, Default)]
struct ProcessFigures {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
    start_time_seconds: Option<f64>,
}

impl ProcessFigures {
    fn read() -> ProcessFigures {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let stat = stat.as_deref().and_then(StatFields::parse);
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|text| boot_time(&text));
        ProcessFigures {
            cpu_seconds: stat.as_ref().map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            resident_bytes: std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|text| status_kb(&text, "VmRSS:"))
                .map(|kb| kb as f64 * 1024.0),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as f64),
            max_fds: std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|text| max_open_files(&text)),
            start_time_seconds: stat
                .zip(boot_time)
                .map(|(s, boot)| boot as f64 + s.starttime as f64 / USER_HZ),
        }
    }
}

/// The fields of `/proc/self/stat` that the series use.
#[derive(Debug, PartialEq)]
struct StatFields {
    utime: u64,
    stime: u64,
    /// Clock ticks after boot at which the process started.
    starttime: u64,
}

impl StatFields {
    /// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may hold spaces and
    /// parentheses itself, so the fields are counted from the last `)`.
    fn parse(text: &str) -> Option<StatFields> {
        let (_, after_name) = text.rsplit_once(')')?;
        // Field 3 (state) is the first after the name: field N is at index N - 3.
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(StatFields {
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
        })
    }
}

/// `btime` of `/proc/stat`: when the system booted, in seconds since the Unix epoch.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// A `kB` figure of `/proc/self/status` (e.g. `VmRSS:`).
fn status_kb(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The soft limit on open files from `/proc/self/limits` (`unlimited` is left out: no finite figure).
fn max_open_files(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    soft.parse::<u64>().ok().map(|n| n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command name with spaces and parentheses does not shift the fields after it.
    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (odd) name (x)) S 1 4242 4242 0 -1 4194560 500 0 0 0 731 269 0 0 20 0 3 0 123456 \
                    10000000 2500 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(
            StatFields::parse(line),
            Some(StatFields {
                utime: 731,
                stime: 269,
                starttime: 123456
            })
        );
        assert_eq!(StatFields::parse("4242 (truncated"), None);
    }

    #[test]
    fn limits_status_and_boot_time_are_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63704                63704                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024.0));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files"
            ),
            None
        );
        assert_eq!(
            status_kb("Name:\tx\nVmRSS:\t   5120 kB\n", "VmRSS:"),
            Some(5120)
        );
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
    }

    /// The series of this very process: its RSS is non-zero, it has open fds, and it started in the past.
    #[test]
    fn this_process_is_described() {
        let mut out = String::new();
        render_process_metrics(&mut out, "1.2.3");
        assert!(
            out.contains("switchyard_build_info{version=\"1.2.3\"} 1\n"),
            "{out}"
        );
        let value = |name: &str| -> f64 {
            out.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {out}"))
        };
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_cpu_seconds_total") >= 0.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let started = value("process_start_time_seconds");
        assert!(
            started <= now + 1.0 && started > now - 3600.0,
            "{started} vs {now}"
        );
    }

    #[test]
    fn log_formats_parse() {
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert!("yaml".parse::<LogFormat>().is_err());
    }
}
