//! `switchyard-ctl routes edit`: the current table opened in the user's editor, parsed and validated here, and
//! put with `If-Match` on the version opened, so that an edit never overwrites a change made meanwhile.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::Value;
use switchyard_schemas::RouteTable;
use switchyard_schemas::api::RoutePut;

use super::{check, path, route_change};
use crate::client::{Call, Failure, Outcome};
use crate::output;
use crate::session::{Session, parse_json};

/// `$VISUAL`, else `$EDITOR`, else `vi`; run by the shell, so that `EDITOR="code --wait"` works.
fn run_editor(file: &Path) -> anyhow::Result<()> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_string());
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file)
        .status()
        .with_context(|| format!("starting the editor '{editor}'"))?;
    if !status.success() {
        bail!("the editor '{editor}' failed ({status}); nothing was changed");
    }
    Ok(())
}

/// Where the edit is kept while it is being made, and after it failed.
fn edit_file(tenant: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "switchyard-ctl-route-{tenant}-{}.json",
        std::process::id()
    ))
}

pub(crate) async fn edit(session: &Session, tenant: &str, comment: String, force: bool) -> Outcome {
    let opened = session.send(&Call::get(path(tenant))).await?;
    let version = opened
        .version
        .or(opened.body.get("version").and_then(Value::as_i64));
    let original = opened.body.get("route").cloned().unwrap_or(Value::Null);
    let text = serde_json::to_string_pretty(&original)? + "\n";
    let file = edit_file(tenant);
    // A new file only: a name in a shared temporary folder must not lead the write to someone else's file.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", file.display()))?;
    run_editor(&file)?;
    let edited =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    if edited == text {
        let _ = std::fs::remove_file(&file);
        eprintln!("edit cancelled: the route of '{tenant}' was not changed");
        return Ok(());
    }
    let kept = |why: String| -> Failure {
        anyhow::anyhow!(
            "{why}\nyour edit is kept in {}; fix it and run: switchyard-ctl routes set {tenant} --file {} \
             --if-match {}{}",
            file.display(),
            file.display(),
            version.unwrap_or(0),
            if force { " --force" } else { "" }
        )
        .into()
    };
    let route: RouteTable =
        parse_json(&edited).map_err(|e| kept(format!("the edited route does not parse: {e}")))?;
    if let Err(failure) = check(session, &route).await {
        return Err(kept(failure.to_string()));
    }
    let put = RoutePut {
        route,
        comment,
        force,
    };
    let call = Call::new(Method::PUT, path(tenant))
        .body(serde_json::to_value(&put)?)
        .if_match(version);
    match session.change(route_change(tenant, call)).await {
        Ok(_) => {
            let _ = std::fs::remove_file(&file);
            Ok(())
        }
        Err(failure @ Failure::Api { .. }) if failure.code() == Some("precondition_failed") => {
            let now = session.send(&Call::get(path(tenant))).await?.body;
            let theirs = now.get("route").cloned().unwrap_or(Value::Null);
            eprintln!(
                "someone else changed the route of '{tenant}' while you edited it (version {} -> {}); nothing was \
                 changed, your edit is kept in {}. Their change:\n{}",
                version.unwrap_or(0),
                output::cell(now.get("version")),
                file.display(),
                output::diff(&output::yaml(&original), &output::yaml(&theirs))
            );
            Err(failure)
        }
        Err(failure) => {
            eprintln!("your edit is kept in {}", file.display());
            Err(failure)
        }
    }
}
