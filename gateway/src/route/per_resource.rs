//! What each write resource of a target gets of a request. The session (`Client::narrow`) writes a tenant's
//! database numbers as the route's base database numbers them (the first write resource's own database, plus the tenant's index);
//! a double-write secondary, or another shard, may have another database of its own, and then gets the same
//! databases in its own numbers. `FLUSHALL` flushes only the tenant's database on every resource whose own
//! database is not 0, whatever the primary's is.

use bytes::Bytes;

use super::RoutePlan;
use crate::cmd::{Command, CommandSpec};
use crate::resp::Request;
use crate::tenancy;

impl RoutePlan {
    /// The bytes write resource `index` of shard `shard` gets for `request` (see the module's doc): the request
    /// itself, unless that resource's own database asks for other numbers. What sends one write to several
    /// resources asks this for each of them.
    pub(crate) fn request_for(
        &self,
        spec: &CommandSpec,
        request: &Request,
        shard: usize,
        index: usize,
    ) -> Bytes {
        let own = self.resource_db(shard, index);
        // A route with several shards refuses the commands that name databases (`tenancy`): only the
        // resources of a single target can need them renumbered.
        let single = self.shards.len() == 1;
        match spec.id {
            Command::Flushall if own != 0 => flushdb(request),
            _ if single && own != self.base_db() => renumbered(spec, request, self.base_db(), own)
                .unwrap_or_else(|| request.raw().clone()),
            _ => request.raw().clone(),
        }
    }
}

/// `FLUSHALL [ASYNC|SYNC]` as `FLUSHDB` with the same option: a tenant that owns one database of a shared Redis
/// flushes that one, never its neighbours'.
fn flushdb(request: &Request) -> Bytes {
    let mut args = request.args().to_vec();
    if let Some(name) = args.first_mut() {
        *name = Bytes::from_static(b"FLUSHDB");
    }
    Request::from_args(args).raw().clone()
}

/// `request`, whose database arguments are numbered for a resource whose own database is `from`, numbered for
/// one whose own database is `to`; `None` when it names no database by number.
fn renumbered(spec: &CommandSpec, request: &Request, from: u32, to: u32) -> Option<Bytes> {
    let shift = i64::from(to) - i64::from(from);
    let renumbered = tenancy::renumber_databases(spec, request, |n| Ok(n + shift)).ok()??;
    Some(renumbered.raw().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::lookup;
    use crate::resp;

    fn request(args: &[&str]) -> Request {
        Request::from_args(args.iter().map(|a| Bytes::from(a.to_string())).collect())
    }

    fn renumber(args: &[&str], from: u32, to: u32) -> Option<Vec<String>> {
        let request = request(args);
        let spec = lookup(request.args()).expect("a known command");
        let raw = renumbered(spec, &request, from, to)?;
        Some(
            resp::request_args(&raw)
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect(),
        )
    }

    #[test]
    fn database_numbers_move_from_one_resource_to_another() {
        assert_eq!(
            renumber(&["MOVE", "k", "3"], 2, 5).unwrap(),
            ["MOVE", "k", "6"]
        );
        assert_eq!(
            renumber(&["COPY", "a", "b", "DB", "7", "REPLACE"], 6, 1).unwrap(),
            ["COPY", "a", "b", "DB", "2", "REPLACE"]
        );
        assert_eq!(
            renumber(&["SWAPDB", "4", "5"], 4, 0).unwrap(),
            ["SWAPDB", "0", "1"]
        );
        // A key that looks like a number, or like the option, is not a database.
        assert_eq!(
            renumber(&["COPY", "1", "db", "DB", "3"], 3, 9).unwrap(),
            ["COPY", "1", "db", "DB", "9"]
        );
        assert_eq!(renumber(&["GET", "1"], 0, 3), None);
        assert_eq!(renumber(&["COPY", "a", "b"], 0, 3), None);
    }

    #[test]
    fn flushall_keeps_its_option() {
        let raw = flushdb(&request(&["flushall", "ASYNC"]));
        assert_eq!(&raw[..], b"*2\r\n$7\r\nFLUSHDB\r\n$5\r\nASYNC\r\n");
    }
}
