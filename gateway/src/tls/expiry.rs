//! When the certificates the gateway holds or meets expire: its listener's and the CAs it trusts (loaded from
//! files), its client certificates, and those its backends present. Each shows in `/metrics` as
//! `switchyard_tls_certificate_expiry_timestamp_seconds{role,source}`, and one that ends within
//! [`WARN_AHEAD`] (or has ended) is logged once as a warning when first seen and again when a scrape finds it
//! has come within the window since.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long before a certificate's end the gateway starts warning.
pub(crate) const WARN_AHEAD: Duration = Duration::from_secs(14 * 86_400);

/// What a certificate is to the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    /// The TLS listener's own certificate.
    Listener,
    /// A CA the listener trusts for client certificates.
    ClientCa,
    /// A certificate a backend node presented.
    Backend,
    /// A CA trusted for a resource's nodes (`tlsCaFile`).
    BackendCa,
    /// The gateway's client certificate to a resource's nodes (`tlsCertFile`).
    BackendClient,
    /// The certificate an `https` control plane presented.
    ControlPlane,
    /// A CA trusted for the control plane (`--control-plane-ca`).
    ControlPlaneCa,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Listener => "listener",
            Role::ClientCa => "client_ca",
            Role::Backend => "backend",
            Role::BackendCa => "backend_ca",
            Role::BackendClient => "backend_client",
            Role::ControlPlane => "control_plane",
            Role::ControlPlaneCa => "control_plane_ca",
        }
    }
}

struct Seen {
    not_after: i64,
    warned: bool,
}

/// Every certificate seen, by role and source (a file, or a backend's `host:port`); for a file with several
/// certificates (a CA bundle), the earliest end.
#[derive(Default)]
pub(crate) struct Certificates {
    seen: Mutex<BTreeMap<(Role, String), Seen>>,
}

/// The process' certificates: backends are met by connection tasks on every worker, which share no other state.
pub(crate) fn certificates() -> &'static Certificates {
    static CERTIFICATES: LazyLock<Certificates> = LazyLock::new(Certificates::default);
    &CERTIFICATES
}

impl Certificates {
    /// Records the certificates (DER) of `source`, replacing what was recorded for it.
    pub(crate) fn observe<'a>(
        &self,
        role: Role,
        source: &str,
        ders: impl IntoIterator<Item = &'a [u8]>,
    ) {
        let Some(not_after) = ders
            .into_iter()
            .filter_map(switchyard_runtime::x509::not_after)
            .min()
        else {
            return;
        };
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let entry = seen.entry((role, source.to_string())).or_insert(Seen {
            not_after,
            warned: false,
        });
        if entry.not_after != not_after {
            *entry = Seen {
                not_after,
                warned: false,
            };
        }
        warn_if_ending(role, source, entry, now());
    }

    /// Every certificate source (role, source, notAfter); warns of those that came near their end since they
    /// were last looked at.
    pub(crate) fn expiries(&self) -> Vec<(&'static str, String, i64)> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let now = now();
        seen.iter_mut()
            .map(|((role, source), entry)| {
                warn_if_ending(*role, source, entry, now);
                (role.label(), source.clone(), entry.not_after)
            })
            .collect()
    }
}

fn warn_if_ending(role: Role, source: &str, entry: &mut Seen, now: i64) {
    let ahead = WARN_AHEAD.as_secs() as i64;
    if entry.warned || entry.not_after - now > ahead {
        return;
    }
    entry.warned = true;
    let role = role.label();
    match entry.not_after - now {
        left if left <= 0 => tracing::warn!(
            role,
            source,
            "TLS certificate expired {} days ago",
            -left / 86_400
        ),
        left => tracing::warn!(
            role,
            source,
            "TLS certificate expires in {} days",
            left / 86_400
        ),
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
