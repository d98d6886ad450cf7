//! The session's part of migration readiness (see `route::readiness`): each command checked against the
//! destination of the tenant's route, and a transaction's keys followed from `MULTI` (from `WATCH`, whose keys
//! the transaction must share a slot with) to `EXEC`, where a transaction whose keys the destination places apart
//! is counted once.
//!
//! Commands are checked as sent to the backend (under the tenant's key namespace, which decides their slot);
//! examples show them as the tenant sent them.

use bytes::Bytes;
use switchyard_schemas::api::ReadinessKind;

use super::client::Client;
use crate::cmd::CommandSpec;
use crate::route::{Secondary, readiness};

/// What a transaction's keys look like on the destination so far.
#[derive(Default, Clone)]
pub(super) struct Followed {
    /// Its first key, and its group there.
    first: Option<((usize, u16), Bytes)>,
    /// The first queued command with a key in another group, and that key.
    apart: Option<(&'static str, Bytes)>,
}

impl Followed {
    /// Follows the keys of command `name`, placed as `destination` places them, until two are apart.
    fn follow<'a>(
        &mut self,
        destination: &Secondary,
        name: &'static str,
        keys: impl Iterator<Item = &'a Bytes>,
    ) {
        for key in keys {
            let group = destination.group_of(key);
            match &self.first {
                None => self.first = Some((group, key.clone())),
                Some((first, _)) if *first != group => {
                    self.apart = Some((name, key.clone()));
                    return;
                }
                Some(_) => {}
            }
        }
    }
}

impl Client {
    /// Checks a command outside a transaction against the destination of the tenant's migration; `args` are as
    /// sent to the backend. For a tenant that is not migrating, this one test is all readiness costs.
    #[inline]
    pub(super) fn check_readiness(&mut self, spec: &CommandSpec, args: &[Bytes]) {
        if self.tenant.as_ref().is_some_and(|v| v.tenant.checks_keys()) {
            self.count_readiness(spec, args);
        }
    }

    // Out of line: the data path of tenants that are not migrating keeps only the test above.
    #[inline(never)]
    fn count_readiness(&mut self, spec: &CommandSpec, args: &[Bytes]) {
        let Some(view) = &self.tenant else { return };
        let Some((counters, destination)) = view.tenant.places_apart() else {
            return;
        };
        counters.checked(1);
        // A command whose keys cannot be read gets Redis' own error wherever it goes.
        if spec.key_indices(args, &mut self.keys).is_err() || self.keys.len() < 2 {
            return;
        }
        if let Some((a, b)) = readiness::apart(destination, args, &self.keys) {
            let prefix = view.tenant.namespace().map(|n| n.prefix().clone());
            counters.found(
                readiness::kind_of(spec),
                spec.name,
                [&args[a], &args[b]],
                prefix.as_deref(),
            );
        }
    }

    /// Follows the keys of a command queued in the open transaction, or watched for the next one (`args` as sent
    /// to the backend), into `followed`.
    pub(super) fn follow_keys(
        &mut self,
        followed: Option<&mut Followed>,
        spec: &'static CommandSpec,
        args: &[Bytes],
    ) {
        let Some(view) = &self.tenant else { return };
        let (Some((counters, destination)), Some(followed)) =
            (view.tenant.places_apart(), followed)
        else {
            return;
        };
        counters.checked(1);
        if followed.apart.is_none() && spec.key_indices(args, &mut self.keys).is_ok() {
            followed.follow(
                destination,
                spec.name,
                self.keys.iter().filter_map(|&i| args.get(i)),
            );
        }
    }

    /// `EXEC` of a transaction that followed `followed`: counted if its keys were placed apart.
    pub(super) fn count_exec(&self, followed: &Followed) {
        let Some(view) = &self.tenant else { return };
        let (Some((counters, _)), Some(((_, first), (command, apart)))) = (
            view.tenant.places_apart(),
            followed.first.as_ref().zip(followed.apart.as_ref()),
        ) else {
            return;
        };
        let prefix = view.tenant.namespace().map(|n| n.prefix().clone());
        counters.found(
            ReadinessKind::Transaction,
            command,
            [first, apart],
            prefix.as_deref(),
        );
    }
}
