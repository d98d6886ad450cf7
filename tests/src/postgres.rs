//! A private Postgres cluster that speaks TLS only, for the control plane's `sslmode` tests: initialised into a
//! scratch directory at test time from the machine's Postgres binaries (`/usr/lib/postgresql/*/bin`, Debian's
//! `postgresql` package), serving a certificate from a test [`Pki`], and stopped on drop.
//!
//! Postgres refuses to run as root, so as root (CI) it runs as the `postgres` user, which owns its directory.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::Command;

use crate::process::ScratchDir;
use crate::{Pki, allocate_port};

pub struct TlsPostgres {
    port: u16,
    bin: PathBuf,
    data: PathBuf,
    /// `runuser -u postgres --` as root, nothing otherwise.
    as_owner: Vec<&'static str>,
    dir: ScratchDir,
}

impl TlsPostgres {
    /// A new cluster on its own port with `ssl=on` and a certificate for 127.0.0.1 and localhost signed by `pki`;
    /// its `pg_hba.conf` accepts TLS connections only (`hostssl`, trust).
    pub fn start(pki: &Pki) -> TlsPostgres {
        let port = allocate_port();
        let dir = ScratchDir::new("postgres", port);
        let as_owner = if running_as_root() {
            run(Command::new("chown").arg("postgres:").arg(&dir.0));
            vec!["runuser", "-u", "postgres", "--"]
        } else {
            Vec::new()
        };
        let postgres = TlsPostgres {
            port,
            bin: newest_bin(),
            data: dir.0.join("data"),
            as_owner,
            dir,
        };
        run(postgres
            .as_owner("initdb")
            .arg("-D")
            .arg(&postgres.data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"]));
        let files = pki.server(&format!("postgres-{port}"), &["localhost", "127.0.0.1"]);
        // The server reads them as its own user, and wants its key readable by nobody else.
        for (from, to) in [(&files.cert, "server.crt"), (&files.key, "server.key")] {
            let to = postgres.data.join(to);
            std::fs::copy(from, &to).expect("copy the server certificate");
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))
                .expect("chmod 600");
            if !postgres.as_owner.is_empty() {
                run(Command::new("chown").arg("postgres:").arg(&to));
            }
        }
        std::fs::write(
            postgres.data.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 trust\n",
        )
        .expect("write pg_hba.conf");
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c ssl=on \
             -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c fsync=off"
        );
        run(postgres
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(&postgres.data)
            .arg("-l")
            .arg(postgres.dir.0.join("server.log"))
            .args(["-w", "-o", &options, "start"]));
        postgres
    }

    /// `postgres://postgres@127.0.0.1:PORT`: add `/database?sslmode=...`.
    pub fn base_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    /// `program` (a Postgres binary, or a plain command) run as the cluster's owner.
    fn as_owner(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let program = if path.exists() {
            path
        } else {
            PathBuf::from(program)
        };
        match self.as_owner.split_first() {
            Some((runuser, args)) => {
                let mut command = Command::new(runuser);
                command.args(args).arg(program);
                command
            }
            None => Command::new(program),
        }
    }
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let _ = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// The newest `/usr/lib/postgresql/<version>/bin`.
fn newest_bin() -> PathBuf {
    let mut bins: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("Postgres server binaries in /usr/lib/postgresql (Debian's postgresql package)")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    bins.sort();
    bins.pop()
        .map(|(_, bin)| bin)
        .expect("initdb in /usr/lib/postgresql/*/bin (Debian's postgresql package)")
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
