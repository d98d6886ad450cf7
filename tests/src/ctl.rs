//! [`Ctl`]: the real `switchyard-ctl` binary, run against a [`ControlPlane`] with an environment of its own (its
//! own `HOME`, none of the caller's `SWITCHYARD_*` variables), so that only what a test gives it counts.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::process::{ScratchDir, binary};
use crate::{ADMIN_TOKEN, ControlPlane, allocate_port};

pub struct Ctl {
    bin: PathBuf,
    env: Vec<(String, String)>,
    home: ScratchDir,
}

/// What one run did.
#[derive(Debug)]
pub struct CtlRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Ctl {
    /// Pointed at `control_plane` by `SWITCHYARD_URL` and `SWITCHYARD_ADMIN_TOKEN`.
    pub fn new(control_plane: &ControlPlane) -> Ctl {
        Ctl::bare()
            .env("SWITCHYARD_URL", &control_plane.url())
            .env("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
    }

    /// With no URL and no token.
    pub fn bare() -> Ctl {
        Ctl {
            bin: binary("switchyard-ctl", "SWITCHYARD_CTL_BIN"),
            env: Vec::new(),
            home: ScratchDir::new("ctl-home", allocate_port()),
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Ctl {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The `HOME` it runs with (empty at first): where `~/.config/switchyard/ctl.json` is looked for.
    pub fn home(&self) -> &Path {
        &self.home.0
    }

    pub fn run(&self, args: &[&str]) -> CtlRun {
        let mut command = Command::new(&self.bin);
        for (key, _) in std::env::vars() {
            if key.starts_with("SWITCHYARD_") || key == "XDG_CONFIG_HOME" {
                command.env_remove(key);
            }
        }
        let output = command
            .env("HOME", &self.home.0)
            // Where `routes edit` keeps an edit that failed.
            .env("TMPDIR", &self.home.0)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(args)
            .output()
            .expect("run switchyard-ctl");
        CtlRun {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs, asserts success, returns what it printed.
    pub fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args);
        assert_eq!(run.code, 0, "switchyard-ctl {args:?}: {run:?}");
        run.stdout
    }

    /// Runs with `-o json`, asserts success, returns the value printed.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.ok(&[args, &["-o", "json"]].concat());
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {out}"))
    }

    /// Runs and asserts the exit code; returns the run.
    pub fn fails(&self, code: i32, args: &[&str]) -> CtlRun {
        let run = self.run(args);
        assert_eq!(run.code, code, "switchyard-ctl {args:?}: {run:?}");
        run
    }
}
