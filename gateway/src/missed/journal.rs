//! The records of missed keys on disk (`--state-dir`), so that they outlive a restart or a crash of the gateway.
//!
//! One file per tenant and secondary under `<state-dir>/repair/`, named by a digest of both: a header (the tenant
//! and the resource), then one entry per key recorded, appended as it is recorded (one `write`, no `fsync`: a
//! process that crashes loses nothing, a host that loses power may lose the last seconds), and an entry when a
//! catch-up is asked. The repair rewrites a file whole (a new file renamed over it) once keys were taken off. A lock
//! file keeps two gateways from sharing one directory. (The same directory keeps the secondaries' identities,
//! `repair/identities.json`: see `repair::restarts`.)
//!
//! A local file rather than the control plane or the primary Redis: recording stays on the failure path of one
//! gateway with nothing else to reach (the control plane may be down, and a reserved key on the primary would sit
//! in the tenant's own keyspace, which it lists and may delete), and the gateway that recorded the keys is the
//! one that repairs them once it is back.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::{CatchUp, MissedKey};

const HEADER: u8 = b'H';
const KEY: u8 = b'K';
const CATCH_UP: u8 = b'C';

/// The directory of the records, held (locked) by this gateway.
pub(crate) struct JournalDir {
    path: PathBuf,
    _lock: File,
}

/// One record's file, open for appending.
pub(crate) struct Journal {
    path: PathBuf,
    file: File,
    header: Vec<u8>,
    /// A write failed: logged once, and the file is rewritten at the next compaction.
    failed: bool,
}

/// A record read back from its file.
pub(crate) struct Loaded {
    pub tenant: String,
    pub resource: String,
    pub keys: Vec<MissedKey>,
    pub catch_up: Option<CatchUp>,
    pub journal: Journal,
}

impl JournalDir {
    /// Opens (creating it) `<state_dir>/repair` and locks it for this gateway.
    pub(crate) fn open(state_dir: &Path) -> io::Result<JournalDir> {
        let path = state_dir.join("repair");
        fs::create_dir_all(&path)?;
        let lock = File::create(path.join("LOCK"))?;
        lock.try_lock().map_err(|_| {
            io::Error::other(format!(
                "{} is in use by another gateway: give each its own --state-dir",
                path.display()
            ))
        })?;
        Ok(JournalDir { path, _lock: lock })
    }

    /// Every record left by the gateway before (files that cannot be read are logged and left alone).
    pub(crate) fn load(&self) -> io::Result<Vec<Loaded>> {
        let mut loaded = Vec::new();
        for entry in fs::read_dir(&self.path)? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "keys") {
                continue;
            }
            match read(&path) {
                Some(record) => loaded.push(record),
                None => tracing::warn!(file = %path.display(),
                    "a record of missed keys cannot be read; it is left as it is"),
            }
        }
        Ok(loaded)
    }

    /// The journal of a new record.
    pub(crate) fn create(&self, tenant: &str, resource: &str) -> io::Result<Journal> {
        let digest = Sha256::digest(format!("{tenant}\0{resource}").as_bytes());
        let name: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        let path = self.path.join(format!("{name}.keys"));
        let header = header(tenant, resource);
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        if file.metadata()?.len() == 0 {
            file.write_all(&header)?;
        }
        Ok(Journal {
            path,
            file,
            header,
            failed: false,
        })
    }
}

impl Journal {
    pub(crate) fn key(&mut self, key: &MissedKey) {
        self.append(&key_entry(key));
    }

    pub(crate) fn catch_up(&mut self, why: CatchUp) {
        self.append(&[CATCH_UP, why.code()]);
    }

    fn append(&mut self, entry: &[u8]) {
        if let Err(e) = self.file.write_all(entry) {
            if !self.failed {
                tracing::warn!(file = %self.path.display(), error = %e,
                    "cannot write the record of missed keys; it would not outlive a restart");
            }
            self.failed = true;
        }
    }

    /// Rewrites the file with `keys` and the catch-up asked, if any.
    pub(crate) fn rewrite<'k>(
        &mut self,
        keys: impl Iterator<Item = &'k MissedKey>,
        catch_up: Option<CatchUp>,
    ) {
        let written = self.write_whole(keys, catch_up);
        match written {
            Ok(()) => self.failed = false,
            Err(e) => {
                tracing::warn!(file = %self.path.display(), error = %e,
                    "cannot rewrite the record of missed keys");
                self.failed = true;
            }
        }
    }

    fn write_whole<'k>(
        &mut self,
        keys: impl Iterator<Item = &'k MissedKey>,
        catch_up: Option<CatchUp>,
    ) -> io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut out = io::BufWriter::new(File::create(&tmp)?);
        out.write_all(&self.header)?;
        for key in keys {
            out.write_all(&key_entry(key))?;
        }
        if let Some(why) = catch_up {
            out.write_all(&[CATCH_UP, why.code()])?;
        }
        out.into_inner().map_err(|e| e.into_error())?;
        fs::rename(&tmp, &self.path)?;
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        Ok(())
    }
}

/// A key's entry: its database and its name, each length-prefixed.
fn key_entry(key: &MissedKey) -> Vec<u8> {
    let mut entry = Vec::with_capacity(9 + key.1.len());
    entry.push(KEY);
    entry.extend_from_slice(&key.0.to_le_bytes());
    entry.extend_from_slice(&(key.1.len() as u32).to_le_bytes());
    entry.extend_from_slice(&key.1);
    entry
}

fn header(tenant: &str, resource: &str) -> Vec<u8> {
    let mut header = vec![HEADER];
    for text in [tenant, resource] {
        header.extend_from_slice(&(text.len() as u32).to_le_bytes());
        header.extend_from_slice(text.as_bytes());
    }
    header
}

/// Reads a record's file: its header, its keys (deduplicated by the record it is loaded into) and whether a
/// catch-up was asked. An entry cut short (a crash in the middle of a write) ends it.
fn read(path: &Path) -> Option<Loaded> {
    let bytes = fs::read(path).ok()?;
    let mut at = 0;
    let mut take = |n: usize| {
        let part = bytes.get(at..at + n)?;
        at += n;
        Some(part)
    };
    let u32_at = |part: &[u8]| Some(u32::from_le_bytes(part.try_into().ok()?));
    if take(1)? != [HEADER] {
        return None;
    }
    let mut text = || {
        let len = u32_at(take(4)?)? as usize;
        String::from_utf8(take(len)?.to_vec()).ok()
    };
    let (tenant, resource) = (text()?, text()?);
    let (mut keys, mut catch_up) = (Vec::new(), None);
    while let Some(kind) = take(1) {
        match kind {
            [KEY] => {
                let Some(entry) = (|| {
                    let db = u32_at(take(4)?)?;
                    let len = u32_at(take(4)?)? as usize;
                    Some((db, Bytes::copy_from_slice(take(len)?)))
                })() else {
                    break;
                };
                keys.push(entry);
            }
            [CATCH_UP] => match take(1).and_then(|code| CatchUp::from_code(*code.first()?)) {
                Some(why) => catch_up = Some(why),
                None => break,
            },
            _ => break,
        }
    }
    let file = OpenOptions::new().append(true).open(path).ok()?;
    Some(Loaded {
        journal: Journal {
            path: path.to_path_buf(),
            file,
            header: header(&tenant, &resource),
            failed: false,
        },
        tenant,
        resource,
        keys,
        catch_up,
    })
}
