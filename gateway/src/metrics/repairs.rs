//! The double-write repair's series in `/metrics`: per tenant and secondary resource, for every record of missed
//! keys the gateway keeps (one per secondary a tenant's writes failed on since the gateway started).

use super::exposition::{family, labels};
use crate::missed::RepairFigures;
use crate::missed::divergence::DivergenceFigures;

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

/// Writes the divergence sampler's families: per tenant and secondary resource it samples.
pub(crate) fn render_divergence(out: &mut String, figures: &[DivergenceFigures]) {
    let labelled = |f: &DivergenceFigures| {
        labels(&[
            ("tenant", f.tenant.as_str()),
            ("resource", f.resource.as_str()),
        ])
    };
    family(
        out,
        "switchyard_repair_divergence_ratio",
        "Estimated share of the tenant's keys whose copies differ on the secondary: differing among the last \
         sampled keys (up to 1000, at most 10 minutes old).",
        "gauge",
        figures.iter().filter_map(|f| Some((labelled(f), f.ratio?))),
    );
    family(
        out,
        "switchyard_repair_divergence_samples",
        "Sampled keys the divergence estimate counts (its window).",
        "gauge",
        figures.iter().map(|f| (labelled(f), f.samples)),
    );
    family(
        out,
        "switchyard_repair_sampled_keys_total",
        "Keys the divergence sampler compared between the primary and the secondary.",
        "counter",
        figures.iter().map(|f| (labelled(f), f.sampled)),
    );
}
