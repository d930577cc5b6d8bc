//! The mirror worker: for each mirror of the store (`scion_fs::mirror`), sends the next
//! snapshot of its directory to its target, one at a time, as an increment on the last one
//! sent. The transfer is a `scion mirror send-one` process (send piped into receive, the same
//! commands a user runs, with `--resumable`), started by the background worker and polled at
//! each of its rounds, so the daemon never waits on another store. A transfer that fails is
//! tried again after `RETRY`; one cut short goes on from where it stopped (the receive kept
//! what arrived); one whose base is gone from the target goes whole. What arrived, verified
//! by the receiver against the tree's content hash, is recorded in the mirrors file, so a
//! restart of either daemon loses nothing and sends nothing twice.

use crate::Engine;
use scion_fs::records::mirrors::Mirror;
use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A failed transfer is tried again after this long.
pub const RETRY: Duration = Duration::from_secs(5);

/// How the worker starts transfers.
#[derive(Clone, Debug)]
pub struct MirrorOptions {
    /// Where the store is mounted (the paths `scion send` takes).
    pub mountpoint: PathBuf,
    /// The store (for the transfers' logs).
    pub store: PathBuf,
    /// The `scion` binary.
    pub exe: PathBuf,
}

type Key = (Vec<u8>, Vec<u8>);

enum Job {
    Running {
        child: Child,
        name: Vec<u8>,
        based: bool,
        log: PathBuf,
    },
    Failed {
        error: String,
        retry_at: Instant,
        /// The next try goes whole (the base was refused).
        whole: bool,
    },
}

/// The transfers of a store's mirrors (shared by the worker and `scion mirror status`).
#[derive(Default)]
pub struct Jobs {
    jobs: Mutex<HashMap<Key, Job>>,
}

fn key(m: &Mirror) -> Key {
    (m.dir.clone(), m.target.clone())
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

impl Jobs {
    /// What mirror `m`'s worker is doing, for `scion mirror status`.
    pub fn state(&self, m: &Mirror) -> String {
        match self.jobs.lock().unwrap().get(&key(m)) {
            None => "idle".into(),
            Some(Job::Running { name, based, .. }) => {
                format!("sending {}{}", show(name), if *based { " (an increment)" } else { " (whole)" })
            }
            Some(Job::Failed { error, retry_at, .. }) => format!(
                "failed: {error} (trying again in {} s)",
                retry_at.saturating_duration_since(Instant::now()).as_secs()
            ),
        }
    }

    /// How many mirrors' last transfer failed.
    pub fn failing(&self) -> u64 {
        self.jobs.lock().unwrap().values().filter(|j| matches!(j, Job::Failed { .. })).count() as u64
    }

    /// Ends the transfers under way (the store is being unmounted): each stops where it is,
    /// and the next mount goes on from there.
    pub fn stop(&self) {
        for job in self.jobs.lock().unwrap().values_mut() {
            if let Job::Running { child, .. } = job {
                // The whole group: send-one and the send and receive it runs.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
                let _ = child.wait();
            }
        }
    }
}

/// One round: finished transfers are recorded, new ones started. (The engine lock is never
/// taken while the jobs are locked: `scion mirror status` takes them in the other order.)
pub fn tick(engine: &Engine, opts: &MirrorOptions) {
    let (list, nexts) = {
        let mut fs = engine.lock();
        let Ok(list) = fs.mirror_list() else { return };
        // A directory that is gone has nothing to send; status says so.
        let nexts: Vec<_> = list.iter().map(|m| fs.mirror_next(m).ok().flatten()).collect();
        (list, nexts)
    };
    let all = engine.mirror_jobs();
    let mut arrived = Vec::new();
    {
        let mut jobs = all.jobs.lock().unwrap();
        jobs.retain(|k, _| list.iter().any(|m| &key(m) == k));
        for (m, next) in list.iter().zip(nexts) {
            let k = key(m);
            if let Some(Job::Running { child, name, based, log }) = jobs.get_mut(&k) {
                let Ok(Some(status)) = child.try_wait() else { continue };
                let (name, based, log) = (name.clone(), *based, log.clone());
                if status.success() {
                    jobs.remove(&k);
                    arrived.push((m.clone(), name));
                } else {
                    let error = last_line(&log).unwrap_or_else(|| format!("scion mirror send-one: {status}"));
                    log::warn!("mirror of /{} to {}: sending {} failed: {error}", show(&m.dir), show(&m.target), show(&name));
                    let whole = based && error.contains("base");
                    jobs.insert(k, Job::Failed { error, retry_at: Instant::now() + RETRY, whole });
                }
                // What to send next is asked again in the next round.
                continue;
            }
            let whole = match jobs.get(&k) {
                Some(Job::Failed { retry_at, .. }) if Instant::now() < *retry_at => continue,
                Some(Job::Failed { whole, .. }) => *whole,
                _ => false,
            };
            let Some(next) = next else { continue };
            let base = if whole { None } else { next.base.clone() };
            match start(opts, m, &next.name, base.as_deref()) {
                Ok((child, log)) => {
                    log::info!("mirror of /{} to {}: sending {}", show(&m.dir), show(&m.target), show(&next.name));
                    jobs.insert(k, Job::Running { child, name: next.name, based: base.is_some(), log });
                }
                Err(error) => {
                    jobs.insert(k, Job::Failed { error, retry_at: Instant::now() + RETRY, whole });
                }
            }
        }
    }
    for (m, name) in arrived {
        let now = scion_fs::schedule::clock::now_secs();
        match engine.lock().mirror_arrived(&m.dir, &m.target, &name, now) {
            Ok(()) => log::info!("mirror of /{} to {}: {} arrived", show(&m.dir), show(&m.target), show(&name)),
            Err(e) => log::error!("mirror of /{}: recording {} failed: {e}", show(&m.dir), show(&name)),
        }
    }
}

/// Starts `scion mirror send-one` for snapshot `name` of `m.dir` (on `base`), in a process
/// group of its own, its stderr in a log file of the store.
fn start(opts: &MirrorOptions, m: &Mirror, name: &[u8], base: Option<&[u8]>) -> Result<(Child, PathBuf), String> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::ffi::OsStrExt;
    let snapdir = opts.mountpoint.join(Path::new(std::ffi::OsStr::from_bytes(&m.dir))).join(".snapshot");
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key(m).hash(&mut h);
    let log = opts.store.join(format!("mirror-{:016x}.log", h.finish()));
    let err = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(&opts.exe);
    cmd.arg("mirror")
        .arg("send-one")
        .arg(snapdir.join(std::ffi::OsStr::from_bytes(name)))
        .arg("--to")
        .arg(std::ffi::OsStr::from_bytes(&m.target));
    if let Some(b) = base {
        cmd.arg("--base").arg(snapdir.join(std::ffi::OsStr::from_bytes(b)));
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err))
        .process_group(0);
    // The daemon blocks the signals its signal thread takes, and a child inherits the mask:
    // unblocked, so that SIGTERM at unmount (`Jobs::stop`) and a user's kill end a transfer.
    unsafe {
        cmd.pre_exec(|| {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("{}: {e}", opts.exe.display()))?;
    Ok((child, log))
}

/// The last line a transfer wrote to its log: why it failed.
fn last_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string())
}
