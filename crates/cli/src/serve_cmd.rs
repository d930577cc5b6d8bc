//! `scion serve nfs`: the mount's daemon serves NFSv3 (`scion-nfs`), or a store that is
//! not mounted is served in the foreground.

use crate::tree_cmds::{self, below_mount};
use scion_daemon::control::{NfsRequest, NfsSpec, Op, Reply};
use scion_daemon::router::Router;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The daemon's NFS server (`scion_daemon::server::NfsService`): at most one, started by
/// `-o nfs=` or `scion serve nfs`, stopped by `scion serve nfs --stop` or the unmount.
pub(crate) struct DaemonNfs {
    router: Arc<Router>,
    tell: Option<scion_nfs::Invalidator>,
    /// The store is mounted read-only: so is what it serves.
    read_only: bool,
    server: Mutex<Option<scion_nfs::NfsServer>>,
}

impl DaemonNfs {
    pub(crate) fn new(router: Arc<Router>, tell: Option<scion_nfs::Invalidator>, read_only: bool) -> DaemonNfs {
        DaemonNfs { router, tell, read_only, server: Mutex::new(None) }
    }

    /// Starts serving with `o` (its `tell` and read-only flag are the daemon's).
    pub(crate) fn start_with(&self, mut o: scion_nfs::NfsOptions) -> Result<String, String> {
        let mut slot = self.server.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.as_ref() {
            return Err(format!("already serving: {} (scion serve nfs --stop first)", s.describe()));
        }
        o.tell = self.tell.clone();
        o.read_only |= self.read_only;
        let listen = o.listen.clone();
        let s = scion_nfs::serve(self.router.clone(), o).map_err(|e| format!("NFS on {listen}: {e}"))?;
        let d = s.describe();
        log::info!("serving {d}");
        *slot = Some(s);
        Ok(d)
    }

    /// Stops serving, if it does (at unmount).
    pub(crate) fn shut(&self) {
        if let Some(s) = self.server.lock().unwrap_or_else(|p| p.into_inner()).take() {
            s.stop();
        }
    }
}

impl scion_daemon::server::NfsService for DaemonNfs {
    fn start(&self, spec: &NfsSpec) -> Result<String, String> {
        self.start_with(options(spec)?)
    }

    fn stop(&self) -> Result<String, String> {
        let s = self.server.lock().unwrap_or_else(|p| p.into_inner()).take().ok_or("not serving NFS")?;
        let d = s.describe();
        s.stop();
        Ok(format!("stopped {d}"))
    }

    fn describe(&self) -> Option<String> {
        self.server.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|s| s.describe())
    }
}

/// The server's options from a request.
fn options(spec: &NfsSpec) -> Result<scion_nfs::NfsOptions, String> {
    spec.listen
        .parse::<std::net::SocketAddr>()
        .map_err(|_| format!("--listen {}: expected ADDR:PORT (127.0.0.1:2049, [::1]:2049)", spec.listen))?;
    let mut o = scion_nfs::NfsOptions::new(&spec.listen);
    o.identity.squash = spec.squash.parse().map_err(|e| format!("--squash: {e}"))?;
    o.identity.anon = (spec.anon_uid, spec.anon_gid);
    o.exports = spec.exports.clone();
    o.read_only_dirs = spec.read_only.clone();
    if spec.max_held != 0 {
        o.max_held = spec.max_held as usize;
    }
    Ok(o)
}

/// What the command line asked for.
pub(crate) struct Args {
    pub mountpoint: Option<PathBuf>,
    pub store: Option<PathBuf>,
    pub listen: String,
    pub export: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    pub squash: String,
    pub anon: String,
    pub max_held: Option<String>,
    pub stop: bool,
}

fn anon(s: &str) -> Result<(u32, u32), String> {
    s.split_once(':')
        .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)))
        .ok_or_else(|| format!("--anon {s}: expected UID:GID (numbers)"))
}

pub(crate) fn nfs(a: Args) -> Result<(), String> {
    let (anon_uid, anon_gid) = anon(&a.anon)?;
    a.squash.parse::<scion_nfs::Squash>()?;
    let max_held = match &a.max_held {
        Some(v) => scion_nfs::parse_max_held(v).map_err(|e| format!("--max-held {v}: {e}"))? as u32,
        None => 0,
    };
    match (&a.mountpoint, &a.store) {
        (Some(_), Some(_)) => Err("give a mount point or --store STORE, not both".into()),
        (None, None) => Err("give the mount point to serve, or --store STORE for a store that is not mounted".into()),
        (None, Some(store)) => {
            if a.stop {
                return Err("--stop stops a mount's server; a --store server stops with Ctrl-C or SIGTERM".into());
            }
            let store = crate::mount::store_arg(store);
            // Paths given are paths inside the store.
            let inside = |p: &PathBuf| p.as_os_str().as_encoded_bytes().to_vec();
            let spec = NfsSpec {
                listen: a.listen.clone(),
                exports: a.export.iter().map(inside).collect(),
                read_only: a.read_only.iter().map(inside).collect(),
                squash: a.squash.clone(),
                anon_uid,
                anon_gid,
                max_held,
            };
            crate::mount::serve_nfs_foreground(&store, options(&spec)?)
        }
        (Some(mnt), None) => {
            let at = tree_cmds::locate(mnt, true, &None)?;
            let Some(root) = at.mnt.clone() else {
                return Err(format!("{} is not in a scion mount", mnt.display()));
            };
            let op = if a.stop {
                Op::Nfs(NfsRequest::Stop)
            } else {
                // Paths are the user's: absolute, or from the current directory.
                let inside = |p: &PathBuf| -> Result<Vec<u8>, String> {
                    let abs = std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()))?;
                    below_mount(&root, &abs)
                };
                let exports: Vec<Vec<u8>> = if a.export.is_empty() { vec![at.rel.clone()] } else { a.export.iter().map(inside).collect::<Result<_, _>>()? };
                Op::Nfs(NfsRequest::Start(NfsSpec {
                    listen: a.listen.clone(),
                    exports,
                    read_only: a.read_only.iter().map(inside).collect::<Result<_, _>>()?,
                    squash: a.squash.clone(),
                    anon_uid,
                    anon_gid,
                    max_held,
                }))
            };
            match tree_cmds::call(&at, &op)? {
                Reply::Nfs(text) => {
                    println!("{text}");
                    Ok(())
                }
                other => Err(format!("unexpected reply {other:?}")),
            }
        }
    }
}
