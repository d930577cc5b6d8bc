//! What a checkpoint's fold costs per changed inode, through the engine (no mount): files of
//! `SIZE` bytes created in one directory, a checkpoint after every `BATCH` of them, as the
//! background folds a writer's small files (issue 38). Prints the median time a fold holds the
//! engine lock (`checkpoint_begin`: the pack sync and commit are not counted) and per inode;
//! run under `perf record` to see where it goes.
//!
//!     cargo run --release --example fold_cost -- STORE FILES [BATCH] [SIZE] [ORDER]
//!
//! STORE is made by `scion init` first. ORDER is `random` (the default: names scattered
//! over the directory, so each fold rewrites most of its leaves), `seq` (names in order,
//! as an untar's, so each fold rewrites the directory's last leaves) or `clone` (`bench/latency`'s
//! pile: FILES files in directories of 1,000, cloned, then every third file of the clone
//! rewritten, a fold after every BATCH rewrites). `FOLD_LOG=1` prints each checkpoint's own
//! log line (fold, write, pack sync and commit times).

use scion_fs::{Fs, Kind, MountOptions};
use std::path::Path;
use std::time::{Duration, Instant};

// The daemon's allocator, set as the daemon sets it (freed pages given back at once,
// `scion` `alloc.rs`): what a fold allocates and frees is part of its cost. One difference:
// the daemon takes blocks of 256 KiB or more from the C library, so this example's page
// faults overstate the daemon's (docs/benchmarks.md, "The journal's zeros ahead of a burst").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Prints the engine's checkpoint log lines (their fold, write and commit times).
struct Log;
impl log::Log for Log {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.target().starts_with("scion_fs::checkpoint")
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) && std::env::var_os("FOLD_LOG").is_some() {
            eprintln!("{}", r.args());
        }
    }
    fn flush(&self) {}
}

fn main() {
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15; // mimalloc.h, v3
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    log::set_logger(&Log).expect("logger");
    log::set_max_level(log::LevelFilter::Debug);
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: u64| args.get(i).map_or(d, |s| s.parse().expect("a number"));
    if args.len() < 3 {
        eprintln!("usage: fold_cost STORE FILES [BATCH] [SIZE]");
        std::process::exit(2);
    }
    let (files, batch, size) = (num(2, 0), num(3, 1024), num(4, 1500));
    let order = args.get(5).map_or("random", |s| s.as_str());
    let random = order == "random";
    let packs = || -> u64 {
        let dir = Path::new(&args[1]).join("packs");
        std::fs::read_dir(dir).expect("packs").map(|e| e.unwrap().metadata().unwrap().len()).sum()
    };
    let packs_before = packs();
    let mut fs = Fs::open(Path::new(&args[1]), MountOptions::new("fold_cost")).expect("open");
    // As the daemon: freed blocks are punched by a thread of their own, not in the fold.
    fs.set_punch_later(true);
    let root = fs.root();
    let dir = fs.mknod(root, b"w", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).expect("mkdir").ino;
    let mut times = if order == "clone" {
        clone_rewrites(&mut fs, dir, files, batch, size)
    } else {
        new_files(&mut fs, dir, files, batch, size, random)
    };
    let n = times.len();
    times.sort();
    if n > 0 {
        let med = times[n / 2];
        println!(
            "{n} folds of {batch}: median {:.1} ms ({:.1} us per inode), max {:.1} ms",
            med.as_secs_f64() * 1e3,
            med.as_secs_f64() * 1e6 / batch as f64,
            times[n - 1].as_secs_f64() * 1e3
        );
        // Freed blocks are never punched here, so the packs' length is all that was written.
        let written = packs() - packs_before;
        println!(
            "{:.1} MB written to the packs, {:.1} KB per file of {size} bytes",
            written as f64 / 1e6,
            written as f64 / 1e3 / files as f64
        );
    }
    fs.close().expect("close");
}

/// The `random` and `seq` orders: FILES new files of SIZE bytes in `dir`, a fold timed after
/// every BATCH of them.
fn new_files(fs: &mut Fs, dir: u64, files: u64, batch: u64, size: u64, random: bool) -> Vec<Duration> {
    let mut times = Vec::new();
    for i in 0..files {
        let name = if random { format!("file-{:08x}", (i as u32).wrapping_mul(2654435761)) } else { format!("file-{i:08}") };
        let f = fs.mknod(dir, name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[]).expect("mknod").ino;
        let mut data = vec![b'x'; size as usize];
        data[..20].copy_from_slice(format!("{i:>20}").as_bytes());
        fs.write(f, 0, &data).expect("write");
        fs.forget(f, 1);
        if (i + 1) % batch == 0 {
            times.push(timed_fold(fs));
        }
    }
    times
}

/// The `clone` order: FILES files of SIZE bytes in directories of 1,000 below `top` (folded
/// and committed, untimed), cloned, then every third file of the clone rewritten with new
/// bytes, a fold timed after every BATCH of them. The engine folds on its own too, as the
/// daemon would, when the rewrites pile up past what a fold should hold (`fold_policy.rs`).
fn clone_rewrites(fs: &mut Fs, top: u64, files: u64, batch: u64, size: u64) -> Vec<Duration> {
    let a = fs.mknod(top, b"a", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).expect("mkdir").ino;
    let mut dirs = Vec::new();
    for i in 0..files {
        if i % 1000 == 0 {
            let name = format!("d{:03}", i / 1000);
            dirs.push(fs.mknod(a, name.as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).expect("mkdir").ino);
        }
        let name = format!("f{i}");
        let f = fs.mknod(*dirs.last().unwrap(), name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[]).expect("mknod").ino;
        fs.write(f, 0, &vec![b'x'; size as usize]).expect("write");
        fs.forget(f, 1);
    }
    fs.checkpoint().expect("checkpoint");
    let b = fs.clone_dir(a, top, b"b", &[], b"fold_cost").expect("clone");
    fs.checkpoint().expect("checkpoint");
    let mut times = Vec::new();
    let mut done = 0;
    for i in (0..files).step_by(3) {
        let d = fs.lookup(b, format!("d{:03}", i / 1000).as_bytes()).expect("lookup dir").ino;
        let f = fs.lookup(d, format!("f{i}").as_bytes()).expect("lookup file").ino;
        fs.setattr(f, scion_fs::SetAttr { size: Some(0), ..Default::default() }).expect("truncate");
        let data = format!("round 1 file {i}\n").repeat(60);
        fs.write(f, 0, data.as_bytes()).expect("write");
        fs.forget(f, 1);
        fs.forget(d, 1);
        done += 1;
        if done % batch == 0 {
            times.push(timed_fold(fs));
        }
    }
    times
}

/// A checkpoint as the daemon's background takes one: folded under the lock (the time
/// returned), its packs synced without it, then committed.
fn timed_fold(fs: &mut Fs) -> Duration {
    let t = Instant::now();
    let sync = fs.checkpoint_begin().expect("fold").expect("no commit in flight");
    let took = t.elapsed();
    let synced = sync.run();
    fs.checkpoint_end(sync, synced).expect("commit");
    took
}
