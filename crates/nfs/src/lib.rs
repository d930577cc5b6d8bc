//! scion over NFSv3: the engine's volumes served to NFS clients (VMs, containers on other
//! hosts, machines without FUSE), beside or instead of the FUSE mount.
//!
//! The protocol (XDR, RPC, MOUNT, the NFS procedures) is the `nfs3_server` crate's, patched
//! (`vendor/nfs3_server/PATCH.md`); what is scion's is the adapter (`adapter/`), the
//! handles (`handle.rs`) and who a call is (`who.rs`). The server runs on its own tokio
//! runtime, in threads of the daemon, and calls the engine as the FUSE adapter does.

mod adapter;
pub mod client_io;
mod handle;
pub mod hints;
mod rpcbind;
mod who;

pub use adapter::{Invalidator, ScionNfs};
/// The protocol crate (for the fuzz targets' use of `FileHandle`).
pub use nfs3_server;
pub use handle::{Handle, HandleKey};
pub use who::{Identity, Squash};

use nfs3_server::tcp::{NFSTcp, NFSTcpListener};
use scion_daemon::router::Router;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How often the server gives back references to inodes removed through the mount.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// `NfsOptions::max_held` by default: about 64 MB of the engine's memory.
pub const MAX_HELD: usize = 1 << 16;

/// `--max-held N` and `-o nfs_max_held=N`: inodes, 64 to 2^24.
pub fn parse_max_held(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (64..=1 << 24).contains(&n) => Ok(n),
        _ => Err("expected a number of inodes from 64 to 16777216".into()),
    }
}

/// What to serve and how.
#[derive(Clone)]
pub struct NfsOptions {
    /// ADDR:PORT to listen on (port 0: any free port).
    pub listen: String,
    pub identity: Identity,
    /// Refuse every change (NFS3ERR_ROFS).
    pub read_only: bool,
    /// The mount's kernel, told of changes made over NFS (none without a FUSE mount).
    pub tell: Option<Invalidator>,
    /// Directories served (paths from the mount root); none: the mount's root.
    pub exports: Vec<Vec<u8>>,
    /// Directories below which changes are refused.
    pub read_only_dirs: Vec<Vec<u8>>,
    /// Inodes the server keeps loaded for its clients at most after each sweep; past it the
    /// oldest are given back and found again by number when used.
    pub max_held: usize,
}

impl NfsOptions {
    pub fn new(listen: &str) -> NfsOptions {
        NfsOptions {
            listen: listen.to_string(),
            identity: Identity::default(),
            read_only: false,
            tell: None,
            exports: Vec::new(),
            read_only_dirs: Vec::new(),
            max_held: MAX_HELD,
        }
    }
}

/// A running server: stopped when dropped.
pub struct NfsServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    fs: ScionNfs,
}

impl NfsServer {
    /// Where it listens (with the port chosen, if 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Inodes it holds for its clients.
    pub fn held(&self) -> usize {
        self.fs.held()
    }

    /// Runs the sweep now (it runs every 10 s by itself): inodes with no name given back,
    /// the oldest past `max_held` given back, the hints written.
    pub fn sweep(&self) {
        self.fs.sweep()
    }

    /// Handles of inodes not held found again by hint and by walk (`ScionNfs::revived`).
    pub fn revived(&self) -> (u64, u64) {
        self.fs.revived()
    }

    /// Where it listens and what it serves, for `scion status`.
    pub fn describe(&self) -> String {
        format!("NFSv3 on {}: {}", self.addr, self.fs.describe())
    }

    /// Stops listening and waits for the server's threads.
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            self.fs.save_hints();
        }
    }
}

impl Drop for NfsServer {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Starts serving `router`'s volumes; returns once the server listens. Handles stay good
/// across restarts (`handle.rs`); the write verifier changes at every start, so clients
/// resend what they wrote UNSTABLE and had not seen committed.
pub fn serve(router: Arc<Router>, opts: NfsOptions) -> std::io::Result<NfsServer> {
    let store = router.main().lock().store_dir().to_path_buf();
    let key = match HandleKey::of_store(&store) {
        Ok(k) => k,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Err(e),
        Err(e) => {
            // A store on read-only media: served, with handles good for this start only.
            log::warn!("nfs: no key kept in {}: {e}; clients' handles will be stale after a restart", store.display());
            HandleKey::random()?
        }
    };
    let generation = key.generation();
    let mut fs = ScionNfs::new(router, key, opts.identity, opts.read_only, opts.tell.clone(), &opts.exports, &opts.read_only_dirs)
        .map_err(std::io::Error::other)?;
    fs.set_max_held(opts.max_held);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<SocketAddr>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let served = fs.clone();
    let listen = opts.listen.clone();
    let thread = std::thread::Builder::new().name("nfs".into()).spawn(move || {
        // One thread: a call's answer takes several task hops (socket, message handler,
        // the call's task, the writer), each a wake-up of another thread on a multi-thread
        // runtime; on two vCPUs a NULL round trip took 706 us so against 157-183 us on one
        // (NFS-Ganesha: 371 us). Engine calls under its lock are short; what waits on the
        // disk (reads of blocks, fsyncs) goes to the blocking pool (`adapter/read.rs`, `sync`).
        let rt = match tokio::runtime::Builder::new_current_thread()
            .thread_name("nfs-worker")
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return;
            }
        };
        rt.block_on(async move {
            let listener = match NFSTcpListener::bind_with_generation(&listen, served.clone(), generation).await {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let addr = SocketAddr::new(listener.get_listen_ip(), listener.get_listen_port());
            let registered = match rpcbind::register(addr.port(), true).await {
                Ok(took) => took,
                Err(e) => {
                    log::warn!("nfs: not registered with rpcbind: {e}");
                    false
                }
            };
            let _ = ready_tx.send(Ok(addr));
            let sweeper = served.clone();
            tokio::spawn(async move {
                let mut t = tokio::time::interval(SWEEP_EVERY);
                loop {
                    t.tick().await;
                    let f = sweeper.clone();
                    let _ = tokio::task::spawn_blocking(move || f.sweep()).await;
                }
            });
            tokio::select! {
                r = listener.handle_forever() => if let Err(e) = r { log::error!("nfs: {e}") },
                _ = stop_rx => {}
            }
            if registered {
                if let Err(e) = rpcbind::register(addr.port(), false).await {
                    log::warn!("nfs: not unregistered from rpcbind: {e}");
                }
            }
        });
        rt.shutdown_timeout(Duration::from_secs(5));
    })?;
    let addr = ready_rx
        .recv()
        .map_err(|_| std::io::Error::other("the NFS server's thread ended before it listened"))??;
    if !addr.ip().is_loopback() {
        log::warn!("nfs: listening on {addr}: NFSv3 with AUTH_SYS believes whatever uid a client claims; allow only trusted hosts to reach this port");
    }
    log::info!("nfs: serving on {addr}");
    Ok(NfsServer {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
        fs,
    })
}
