//! Which commands a deployment knows, for readiness (docs/migration.md#readiness): the commands a tenant ran,
//! asked of one server of each of the deployment's resources with `COMMAND INFO`, which answers nil for a name
//! the server does not know. That one question covers an older Redis, a command renamed or disabled there
//! (`rename-command`) and a module it does not load alike, where a version table would only know versions.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use redis::Value;
use switchyard_schemas::RouteTable;

use crate::migration::deployment::{Resource, Server};
use crate::migration::error::{TaskError, TaskResult};

/// The longest the whole check may take: it runs while an operator (or a cutover) waits for the answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How many elements Redis 7.0 and later put in a command's `COMMAND INFO` entry (the last: its subcommands).
/// Older servers give fewer, and do not know `container|subcommand` names there.
const ENTRY_WITH_SUBCOMMANDS: usize = 10;

/// The names among `names` that some resource of `destination` (resource names inlined to URLs) does not know,
/// or why they could not be checked (the destination unreachable, `COMMAND` refused by its ACL...). A resource
/// is asked through the primary write resource of each target, once.
pub(crate) async fn unknown(
    destination: &RouteTable,
    names: &[&str],
) -> Result<BTreeSet<String>, String> {
    let mut unknown = BTreeSet::new();
    if names.is_empty() {
        return Ok(unknown);
    }
    let mut asked = HashSet::new();
    for target in destination.targets() {
        let Some(url) = target.write_resources().first() else {
            continue;
        };
        if !asked.insert(url.clone()) {
            continue;
        }
        let shown = crate::redact::url(url);
        let found = tokio::time::timeout(CHECK_TIMEOUT, unknown_at(url, names))
            .await
            .map_err(|_| format!("{shown}: no answer within {}s", CHECK_TIMEOUT.as_secs()))?
            .map_err(|e| format!("{shown}: {e}"))?;
        unknown.extend(found);
    }
    Ok(unknown)
}

/// The names `url`'s server does not know.
async fn unknown_at(url: &str, names: &[&str]) -> TaskResult<Vec<String>> {
    let mut server = Resource::one_server(url).await?;
    let entries = command_info(&mut server, names).await?;
    let missing: Vec<&str> = names
        .iter()
        .zip(&entries)
        .filter(|(_, entry)| matches!(entry, Value::Nil))
        .map(|(name, _)| *name)
        .collect();
    // A subcommand unknown to a server older than 7.0 may be one it cannot name: its container decides.
    let containers: Vec<&str> = missing
        .iter()
        .filter_map(|name| name.split_once('|').map(|(container, _)| container))
        .collect();
    let entries = command_info(&mut server, &containers).await?;
    let pre_7: HashSet<&str> = containers
        .iter()
        .zip(&entries)
        .filter(|(_, entry)| {
            matches!(entry, Value::Array(fields) if fields.len() < ENTRY_WITH_SUBCOMMANDS)
        })
        .map(|(container, _)| *container)
        .collect();
    Ok(missing
        .into_iter()
        .filter(|name| {
            name.split_once('|')
                .is_none_or(|(container, _)| !pre_7.contains(container))
        })
        .map(str::to_string)
        .collect())
}

/// `COMMAND INFO names...`: one entry per name, nil for a name the server does not know.
async fn command_info(server: &mut Server, names: &[&str]) -> TaskResult<Vec<Value>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let entries: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(names)
        .query_async(&mut server.conn)
        .await
        .map_err(|cause| TaskError::redis("COMMAND INFO", &server.addr, cause))?;
    if entries.len() != names.len() {
        return Err(TaskError::unexpected(
            &server.addr,
            format!(
                "COMMAND INFO answered {} entries for {} names",
                entries.len(),
                names.len()
            ),
        ));
    }
    Ok(entries)
}
