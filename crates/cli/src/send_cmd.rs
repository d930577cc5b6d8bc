//! `scion send PATH [--base BASE]` (issue 20): a stream of the tree at PATH, whole or as what
//! changed from BASE (`scion_fs::stream` says the format). The tree sent is a snapshot, so it
//! does not change while it is read: PATH itself if it is one, otherwise one taken for the
//! send and destroyed after. The daemon makes the stream (`scion_daemon::send`) and hands it
//! over in pieces; this side compresses it (zstd, in worker threads) and writes it out.

use crate::tree_cmds::{call, call_streaming, locate, store_path, utc_now_name, Located};
use scion::stream::FLAG_ZSTD;
use scion_daemon::control::{Op, Reply, Target};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

pub struct SendArgs {
    pub path: PathBuf,
    pub base: Option<PathBuf>,
    pub output: Option<PathBuf>,
    pub no_compress: bool,
    pub progress: bool,
    /// A resume token from `scion receive --resumable`: send only what did not arrive.
    pub resume: Option<String>,
}

pub fn send(a: SendArgs) -> Result<(), String> {
    let at = locate(&a.path, true, &None)?;
    let Some(mnt) = at.mnt.clone() else {
        return Err(format!("{} is not in a mounted scion store", a.path.display()));
    };
    let rel = store_path(&at);
    if a.resume.is_some() && !in_snapshot(&rel) {
        return Err("--resume sends again what was sent: give the snapshot that was sent (PATH/.snapshot/NAME)".into());
    }
    let (snap, temp) = if in_snapshot(&rel) {
        (rel.clone(), false)
    } else {
        let name = utc_now_name().into_bytes();
        call(&at, &Op::Snapshot { path: rel.clone(), name: name.clone() })?;
        ([&rel[..], b"/.snapshot/", &name].concat(), true)
    };
    let _ = mnt;
    let r = send_snapshot(&a, &at, &snap);
    if temp {
        if let Err(e) = call(&at, &Op::Destroy { target: Target::Path(snap.clone()), recursive: true }) {
            eprintln!("scion send: the snapshot {} stays: {e}", String::from_utf8_lossy(&snap));
        }
    }
    r
}

/// zstd worker threads: one per CPU beyond the first, at least one (`SCION_SEND_THREADS`).
fn compress_threads() -> u32 {
    std::env::var("SCION_SEND_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32 - 1).max(1))
}

fn in_snapshot(rel: &[u8]) -> bool {
    rel.split(|&c| c == b'/').any(|n| n == b".snapshot")
}

fn hash_of(at: &Located, path: &[u8]) -> Result<[u8; 32], String> {
    match call(at, &Op::TreeHash { path: path.to_vec() })? {
        Reply::TreeHash(h) => Ok(h),
        _ => Err("the daemon answered something else".into()),
    }
}

fn send_snapshot(a: &SendArgs, at: &Located, snap: &[u8]) -> Result<(), String> {
    let resume = match &a.resume {
        None => None,
        Some(t) => {
            let (from, chain, troot) = scion::stream::parse_token(t)?;
            if troot != hash_of(at, snap)? {
                return Err(format!("the resume token is for another tree than {}", a.path.display()));
            }
            Some((from, chain))
        }
    };
    let base = match &a.base {
        None => None,
        Some(b) => {
            let bat = locate(b, true, &None)?;
            if bat.store != at.store {
                return Err(format!("{} is not in the same store as {}", b.display(), a.path.display()));
            }
            Some(store_path(&bat))
        }
    };
    let mut out: Box<dyn Write> = match &a.output {
        Some(f) => Box::new(std::fs::File::create(f).map_err(|e| format!("{}: {e}", f.display()))?),
        None if unsafe { libc::isatty(1) } == 1 => {
            return Err("stdout is a terminal, where a stream of bytes is no use: redirect it (> FILE, or | scion receive DIR) or give -o FILE".into())
        }
        None => Box::new(std::io::stdout().lock()),
    };
    let io = |e: std::io::Error| format!("writing the stream: {e}");
    let flags = if a.no_compress { 0 } else { FLAG_ZSTD };
    scion::stream::write_header(&mut out, flags).map_err(io)?;
    let mut progress = Progress::new(a.progress);
    {
        let mut body: Box<dyn Write + '_> = if a.no_compress {
            Box::new(std::io::BufWriter::with_capacity(1 << 20, &mut out))
        } else {
            // Compressed by worker threads while the daemon makes the stream.
            let mut e = zstd::stream::write::Encoder::new(&mut out, 3).map_err(io)?;
            e.multithread(compress_threads()).map_err(io)?;
            Box::new(e.auto_finish())
        };
        let mut sent = 0u64;
        let mut sink = |b: &[u8]| -> Result<(), String> {
            body.write_all(b).map_err(io)?;
            sent += b.len() as u64;
            progress.tick(sent);
            Ok(())
        };
        let op = Op::Send {
            snap: snap.to_vec(),
            base,
            resume,
        };
        match call_streaming(at, &op, &mut sink)? {
            Reply::Sent(_) => {}
            _ => return Err("the daemon answered something else".into()),
        }
        body.flush().map_err(io)?;
        progress.done(sent);
    }
    out.flush().map_err(io)?;
    Ok(())
}

/// Bytes sent, the rate, on stderr twice a second (a terminal, or `--progress`).
pub struct Progress {
    on: bool,
    start: Instant,
    last: Instant,
}

impl Progress {
    pub fn new(asked: bool) -> Progress {
        let on = asked || std::io::IsTerminal::is_terminal(&std::io::stderr());
        Progress {
            on,
            start: Instant::now(),
            last: Instant::now(),
        }
    }

    pub fn tick(&mut self, bytes: u64) {
        if self.on && self.last.elapsed().as_millis() >= 500 {
            self.last = Instant::now();
            let s = self.start.elapsed().as_secs_f64().max(0.001);
            eprint!("\r{} MiB, {:.0} MiB/s\x1b[K", bytes >> 20, bytes as f64 / s / 1048576.0);
        }
    }

    pub fn done(&self, bytes: u64) {
        if self.on {
            let s = self.start.elapsed().as_secs_f64();
            eprintln!("\r{} MiB in {s:.1} s\x1b[K", bytes >> 20);
        }
    }
}
