//! `KeyScope`: which keys of a deployment belong to the migrating tenant, on either side.
//!
//! A tenant with a key namespace owns exactly the keys that start with it: the gateway stores every key it names
//! as `namespace + key`, on the old deployment and (the tenant keeping its namespace) on the new one. A tenant
//! without a namespace owns its whole database. Backfill and verify SCAN with `MATCH <escaped namespace>*` so that
//! Redis skips the other tenants' keys, and test every key it returns against the prefix again: the pattern is
//! only the fast path, never what decides whether a key is read, copied, repaired or deleted.
//!
//! How many keys a task will read is estimated when it starts: `DBSIZE` counts every tenant's keys, so in a
//! database the tenant may share it is scaled by the tenant's share of a sample of random keys (`RANDOMKEY`).

use redis::Value;
use switchyard_schemas::policy::escape_glob;

use crate::migration::deployment::Server;
use crate::migration::error::{TaskError, TaskResult};
use crate::migration::keys::send;

/// Random keys sampled per server to estimate the tenant's share of a shared database: one pipeline, and a
/// standard deviation of at most 3% of the database's size (a share of 0.5 over 256 draws).
const SAMPLES: usize = 256;

/// The keys one tenant owns in a database it may share.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyScope {
    /// The namespace as stored before every key; `None`: every key of the database.
    prefix: Option<Vec<u8>>,
}

impl KeyScope {
    pub(crate) fn new(namespace: Option<&str>) -> KeyScope {
        KeyScope {
            prefix: namespace.map(|n| n.as_bytes().to_vec()),
        }
    }

    /// The `MATCH` argument of a SCAN over the tenant's keys (`None`: SCAN without `MATCH`).
    pub(crate) fn pattern(&self) -> Option<Vec<u8>> {
        self.prefix.as_ref().map(|prefix| {
            let mut pattern = escape_glob(prefix);
            pattern.push(b'*');
            pattern
        })
    }

    /// Whether the tenant owns `key`.
    pub(crate) fn holds(&self, key: &[u8]) -> bool {
        self.prefix
            .as_ref()
            .is_none_or(|prefix| key.starts_with(prefix))
    }

    /// Whether some keys of the database may be another tenant's (the estimate of a task's size cannot be the
    /// database's size then).
    pub(crate) fn is_partial(&self) -> bool {
        self.prefix.is_some()
    }

    /// About how many of the tenant's keys `server` holds: its `DBSIZE`, scaled by the tenant's share of
    /// `SAMPLES` random keys when the database may hold other tenants' keys (0 when none could be sampled, as when
    /// `RANDOMKEY` is renamed away).
    pub(crate) async fn estimate(&self, server: &Server) -> TaskResult<u64> {
        let mut conn = server.conn.clone();
        let size: u64 = redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .map_err(|e| TaskError::redis("DBSIZE", &server.addr, e))?;
        if !self.is_partial() || size == 0 {
            return Ok(size);
        }
        let mut pipe = redis::pipe();
        for _ in 0..SAMPLES {
            pipe.cmd("RANDOMKEY");
        }
        let (mut sampled, mut hits) = (0, 0);
        for reply in send(server, &pipe, SAMPLES).await? {
            if let Value::BulkString(key) = reply {
                sampled += 1;
                hits += usize::from(self.holds(&key));
            }
        }
        Ok(scale(size, hits, sampled))
    }

    /// `keys` without those the tenant does not own.
    pub(crate) fn retain(&self, mut keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        keys.retain(|key| self.holds(key));
        keys
    }
}

/// `size` times the share `hits / sampled`, rounded; 0 without a sample.
fn scale(size: u64, hits: usize, sampled: usize) -> u64 {
    if sampled == 0 {
        return 0;
    }
    (size as f64 * hits as f64 / sampled as f64).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_matched_with_its_glob_characters_escaped() {
        assert_eq!(
            KeyScope::new(Some("shop:")).pattern().as_deref(),
            Some(&b"shop:*"[..])
        );
        assert_eq!(
            KeyScope::new(Some(r"a*b?[c]\d:")).pattern().as_deref(),
            Some(&br"a\*b\?\[c\]\\d:*"[..])
        );
        assert_eq!(KeyScope::new(None).pattern(), None);
    }

    #[test]
    fn only_keys_starting_with_the_namespace_are_the_tenants() {
        let scope = KeyScope::new(Some("t1*:"));
        // What an unescaped `t1*:*` would also match, and what a server ignoring MATCH would return.
        let scanned = [
            &b"t1*:a"[..],
            b"t1*:",
            b"t1x:a",
            b"t1:",
            b"t2:a",
            b"",
            b"T1*:a",
        ];
        let kept = scope.retain(scanned.iter().map(|k| k.to_vec()).collect());
        assert_eq!(kept, [b"t1*:a".to_vec(), b"t1*:".to_vec()]);
        assert!(scope.is_partial());
    }

    #[test]
    fn a_tenant_without_a_namespace_owns_every_key() {
        let scope = KeyScope::new(None);
        assert!(scope.holds(b"anything") && scope.holds(b""));
        assert!(!scope.is_partial());
        assert_eq!(scope.retain(vec![b"a".to_vec()]), [b"a".to_vec()]);
    }

    #[test]
    fn a_shared_database_is_estimated_by_the_tenants_share_of_the_sample() {
        assert_eq!(scale(900, 85, 256), 299);
        assert_eq!(scale(900, 0, 256), 0);
        assert_eq!(scale(900, 256, 256), 900);
        assert_eq!(scale(900, 0, 0), 0);
    }
}
