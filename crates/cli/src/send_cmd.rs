//! `scion send PATH [--base BASE]` (issue 20): a stream of the tree at PATH, whole or as what
//! changed from BASE (`scion_fs::stream` says the format). The tree sent is a snapshot, so it
//! does not change while it is read: PATH itself if it is one, otherwise one taken for the
//! send and destroyed after. The daemon makes the stream (`scion_daemon::send`) and hands it
//! over in pieces; this side compresses it (zstd, in worker threads) and writes it out.

use crate::tree_cmds::{call, call_streaming, locate, store_path, Located};
use scion::client::utc_now_name;
use scion::stream::FLAG_ZSTD;
use scion_daemon::control::{Op, Reply, SendDedup, Target};
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
    /// A command the stream goes to, whose stdout comes back (a two-way channel).
    pub through: Option<String>,
    /// Negotiate over `through` which blocks the receiver holds.
    pub dedup: bool,
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

/// zstd on the wire: level 1 with long-distance matching over a 128 MiB window finds what a
/// tree repeats across files (the same library in two packages, a binary and its copy) and
/// costs less CPU than level 3 without it: on the 146 MiB increment of `bench/send`, 50.8 MB
/// against 55.9 MB, and the send and receive together 12% faster on two CPUs, where
/// compression competes with both daemons. A receiver needs the window in memory (zstd's
/// default limit, `receive_cmd::ZSTD_WINDOW_LOG_MAX`).
pub const ZSTD_LEVEL: i32 = 1;
pub const ZSTD_WINDOW_LOG: u32 = 27;
/// Bytes compressed per job of the worker threads: zstd's default for this window is 512 MiB,
/// which would hold the stream back until that much was made (or the end).
const ZSTD_JOB: u32 = 8 << 20;

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
    if a.through.is_some() && a.output.is_some() {
        return Err("--through and -o both say where the stream goes: give one".into());
    }
    if a.dedup && resume.is_some() {
        return Err("--dedup negotiates a whole stream; a resumed one sends what is left as it is: drop --dedup".into());
    }
    let mut child = a.through.as_deref().map(spawn_receiver).transpose()?;
    let mut out: Box<dyn Write> = match (&mut child, &a.output) {
        (Some(c), _) => Box::new(c.stdin.take().expect("a piped stdin")),
        (None, Some(f)) => Box::new(std::fs::File::create(f).map_err(|e| format!("{}: {e}", f.display()))?),
        (None, None) if unsafe { libc::isatty(1) } == 1 => {
            return Err("stdout is a terminal, where a stream of bytes is no use: redirect it (> FILE, or | scion receive DIR) or give -o FILE".into())
        }
        (None, None) => Box::new(std::io::stdout().lock()),
    };
    let io = |e: std::io::Error| format!("writing the stream: {e}");
    let mut flags = if a.no_compress { 0 } else { FLAG_ZSTD };
    if a.dedup {
        flags |= scion::stream::FLAG_NEGOTIATE;
    }
    scion::stream::write_header(&mut out, flags).map_err(|e| match e.kind() {
        // A receiver that refuses at once (its destination exists) may be gone already.
        std::io::ErrorKind::BrokenPipe if a.dedup => RECEIVER_GONE.to_string(),
        _ => io(e),
    })?;
    // What comes back from the receiving command: the answer to the offer, then its output,
    // shown here as it comes.
    let mut back = child.as_mut().map(|c| c.stdout.take().expect("a piped stdout"));
    let dedup = match (a.dedup, back.as_mut()) {
        (true, Some(back)) => negotiate(at, snap, &base, &mut out, back)?,
        _ => SendDedup::Off,
    };
    let shown = back.map(|mut b| std::thread::spawn(move || std::io::copy(&mut b, &mut std::io::stdout())));
    let mut progress = Progress::new(a.progress);
    {
        let mut body: Box<dyn Write + '_> = if a.no_compress {
            Box::new(std::io::BufWriter::with_capacity(1 << 20, &mut out))
        } else {
            // Compressed by worker threads while the daemon makes the stream.
            let mut e = zstd::stream::write::Encoder::new(&mut out, ZSTD_LEVEL).map_err(io)?;
            e.multithread(compress_threads()).map_err(io)?;
            e.long_distance_matching(true).map_err(io)?;
            e.window_log(ZSTD_WINDOW_LOG).map_err(io)?;
            e.set_parameter(zstd::stream::raw::CParameter::JobSize(ZSTD_JOB)).map_err(io)?;
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
            dedup,
        };
        match call_streaming(at, &op, &mut sink)? {
            Reply::Sent(_) => {}
            _ => return Err("the daemon answered something else".into()),
        }
        body.flush().map_err(io)?;
        progress.done(sent);
    }
    out.flush().map_err(io)?;
    // The receiver sees the end of its input, finishes and says so.
    drop(out);
    if let Some(mut c) = child {
        let status = c.wait().map_err(|e| format!("waiting for the receiving command: {e}"))?;
        if let Some(t) = shown {
            let _ = t.join();
        }
        if !status.success() {
            return Err(format!("the receiving command failed ({status}); its messages are above"));
        }
    }
    Ok(())
}

/// Why a `--dedup` send stops when its receiver exits before answering (as `read_answer`
/// says when the answer is cut short).
const RECEIVER_GONE: &str = "the receiver stopped before it answered the block offer (its messages say why)";

/// `--through CMD`: the command, run by sh with the stream on its stdin and its stdout read
/// back (its stderr is ours).
fn spawn_receiver(cmd: &str) -> Result<std::process::Child, String> {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("--through {cmd:?}: {e}"))
}

/// The offer of the stream's blocks (asked of the daemon: a pass that reads no data)
/// and the receiver's answer: the hashes that may go without their bytes.
fn negotiate(at: &Located, snap: &[u8], base: &Option<Vec<u8>>, out: &mut dyn Write, back: &mut dyn std::io::Read) -> Result<SendDedup, String> {
    let mut offered = Vec::new();
    let op = Op::Send { snap: snap.to_vec(), base: base.clone(), resume: None, dedup: SendDedup::Offer };
    call_streaming(at, &op, &mut |b: &[u8]| {
        offered.extend_from_slice(b);
        Ok(())
    })?;
    let mut hashes: Vec<[u8; 32]> = offered.chunks_exact(32).map(|h| h.try_into().expect("32 bytes")).collect();
    hashes.truncate(scion::stream::MAX_OFFER);
    // A receiver that refuses the stream (its destination exists, say) exits before it reads
    // the offer: the pipe breaks, and the same words as a missing answer say so.
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::BrokenPipe => RECEIVER_GONE.to_string(),
        _ => format!("offering blocks to the receiver: {e}"),
    };
    scion::stream::write_offer(&mut &mut *out, &hashes).map_err(io)?;
    out.flush().map_err(io)?;
    let held = scion::stream::read_answer(&mut &mut *back, hashes.len())?;
    let mut named: Vec<[u8; 32]> = hashes.iter().zip(&held).filter(|(_, h)| **h).map(|(x, _)| *x).collect();
    eprintln!(
        "scion send: the receiver holds {} of the {} blocks offered ({} not sent)",
        named.len(),
        hashes.len(),
        crate::control::human(named.len() as u64 * 65536)
    );
    // One request names at most this many; the rest go as bytes.
    named.truncate(scion_daemon::control::MAX_HASHES_PER_REQUEST);
    Ok(SendDedup::Use(named))
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
