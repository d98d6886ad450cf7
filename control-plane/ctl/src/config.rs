//! Where `switchyard-ctl` finds the control plane and its admin token: flags, then environment variables, then a
//! profile of the profile file (`~/.config/switchyard/ctl.json`), then the defaults.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The profile file: named profiles, and the one used without `--profile`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

/// One control plane. Relative paths are relative to the profile file's folder.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    url: Option<String>,
    admin_token_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
}

/// What flags and environment gave (clap merges the two).
pub(crate) struct Given {
    pub(crate) url: Option<String>,
    pub(crate) admin_token: Option<String>,
    pub(crate) admin_token_file: Option<PathBuf>,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) profile: Option<String>,
    pub(crate) config: Option<PathBuf>,
}

/// The resolved connection settings.
pub(crate) struct Endpoint {
    pub(crate) url: String,
    pub(crate) token: Option<String>,
    pub(crate) ca_file: Option<PathBuf>,
}

/// `$XDG_CONFIG_HOME/switchyard/ctl.json`, else `~/.config/switchyard/ctl.json`.
fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("switchyard").join("ctl.json"))
}

/// The profile to use: `--profile NAME` must exist; without it, the file's `default` profile if any.
fn profile(given: &Given) -> anyhow::Result<(Profile, PathBuf)> {
    let path = match (&given.config, default_path()) {
        (Some(path), _) => path.clone(),
        (None, Some(path)) if path.exists() => path,
        (None, _) if given.profile.is_some() => bail!("--profile needs a profile file (--config)"),
        (None, _) => return Ok((Profile::default(), PathBuf::new())),
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the profile file {}", path.display()))?;
    let mut file: ProfileFile = serde_json::from_str(&text)
        .with_context(|| format!("the profile file {}", path.display()))?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let Some(name) = given.profile.clone().or(file.default.clone()) else {
        return Ok((Profile::default(), dir));
    };
    match file.profiles.remove(&name) {
        Some(found) => Ok((found, dir)),
        None => bail!(
            "the profile file {} has no profile '{name}' (it has: {})",
            path.display(),
            file.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    }
}

fn read_token(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the admin token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the admin token file {} is empty", path.display());
    }
    Ok(token.to_string())
}

impl Given {
    pub(crate) fn resolve(self) -> anyhow::Result<Endpoint> {
        let (profile, dir) = profile(&self)?;
        let relative = |path: PathBuf| dir.join(path);
        let token = match (self.admin_token, self.admin_token_file) {
            // Which one was meant cannot be told (a flag or an environment variable, on either side).
            (Some(_), Some(_)) => bail!(
                "both an admin token (--admin-token or SWITCHYARD_ADMIN_TOKEN) and an admin token file \
                 (--admin-token-file or SWITCHYARD_ADMIN_TOKEN_FILE) are given: give one"
            ),
            (Some(token), None) => Some(token),
            (None, Some(file)) => Some(read_token(&file)?),
            (None, None) => match profile.admin_token_file.map(relative) {
                Some(file) => Some(read_token(&file)?),
                None => None,
            },
        };
        Ok(Endpoint {
            url: self
                .url
                .or(profile.url)
                .unwrap_or_else(|| DEFAULT_URL.to_string()),
            token,
            ca_file: self.ca_file.or(profile.ca_file.map(relative)),
        })
    }
}
