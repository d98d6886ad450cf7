//! The double-write repair's series in `/metrics`: per tenant and secondary resource, for every record of missed
//! keys the gateway keeps (one per secondary a tenant's writes failed on since the gateway started).

use super::exposition::{family, labels};
use crate::missed::RepairFigures;

/// Writes the repair's families.
pub(crate) fn render(out: &mut String, figures: &[RepairFigures]) {
    type Field = fn(&RepairFigures) -> i64;
    const FAMILIES: [(&str, &str, &str, Field); 8] = [
        (
            "switchyard_repair_pending_keys",
            "Keys a double-write secondary missed that are not repaired yet.",
            "gauge",
            |f| f.pending,
        ),
        (
            "switchyard_repair_divergent_keys",
            "Keys whose copies differed when last compared and are not equal yet (measured divergence).",
            "gauge",
            |f| f.differing,
        ),
        (
            "switchyard_repair_catching_up",
            "1 while every key of the tenant is owed a comparison (overflow, unnamed keys, restarted secondary).",
            "gauge",
            |f| i64::from(f.catching_up),
        ),
        (
            "switchyard_repair_repaired_total",
            "Keys copied from the primary and then found equal on the secondary.",
            "counter",
            |f| f.repaired,
        ),
        (
            "switchyard_repair_failures_total",
            "Repairs the secondary refused, or keys given up after repeated attempts.",
            "counter",
            |f| f.failures,
        ),
        (
            "switchyard_repair_overflows_total",
            "Times the record of missed keys overflowed its bound.",
            "counter",
            |f| f.overflows,
        ),
        (
            "switchyard_repair_catch_ups_total",
            "Catch-ups asked (every key of the tenant compared).",
            "counter",
            |f| f.catch_ups,
        ),
        (
            "switchyard_repair_scanned_keys_total",
            "Keys catch-ups compared (their progress).",
            "counter",
            |f| f.scanned,
        ),
    ];
    for (name, help, kind, field) in FAMILIES {
        let samples = figures.iter().map(|f| {
            let pairs = [
                ("tenant", f.tenant.as_str()),
                ("resource", f.resource.as_str()),
            ];
            (labels(&pairs), field(f))
        });
        family(out, name, help, kind, samples);
    }
}
