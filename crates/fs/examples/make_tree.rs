//! Makes a large tree in an unmounted store through the engine, much faster than through a
//! mount (no FUSE round trips): for benches that need millions of files (`bench/clone-beside`).
//!
//!     cargo run --release --example make_tree -- STORE NAME FILES [PER_DIR]
//!
//! STORE is made by `scion init` first. NAME is a new directory at the store's top holding
//! FILES files of 100 distinct bytes each (kept inline in their records), PER_DIR (default
//! 1000) to a directory `dN`, or all of them in NAME itself with PER_DIR 0. Progress goes to
//! stderr. Exits 1 with a message on any error.

use scion_fs::{Fs, Kind, MountOptions};
use std::path::Path;
use std::time::Instant;

/// Files between checkpoints: bounds what the engine holds in memory while the tree grows.
const BATCH: u64 = 100_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 || args.len() > 5 {
        eprintln!("usage: make_tree STORE NAME FILES [PER_DIR]");
        std::process::exit(2);
    }
    let number = |s: &str, what: &str| -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("make_tree: {what} must be a number, not {s:?}");
            std::process::exit(2)
        })
    };
    let files = number(&args[3], "FILES");
    let per_dir = args.get(4).map_or(1000, |s| number(s, "PER_DIR"));
    if let Err(e) = make(Path::new(&args[1]), &args[2], files, per_dir) {
        eprintln!("make_tree: {e}");
        std::process::exit(1);
    }
}

fn make(store: &Path, name: &str, files: u64, per_dir: u64) -> Result<(), String> {
    let mut fs = Fs::open(store, MountOptions::new("make_tree")).map_err(|e| format!("{}: {e}", store.display()))?;
    let mk = |fs: &mut Fs, parent, name: &[u8], kind, mode| {
        fs.mknod(parent, name, kind, mode, 0, 0, 0, 0, &[])
            .map(|a| a.ino)
            .map_err(|e| format!("mknod {}: {e:?}", String::from_utf8_lossy(name)))
    };
    let root = fs.root();
    let top = mk(&mut fs, root, name.as_bytes(), Kind::Dir, 0o755)?;
    let t0 = Instant::now();
    let mut dir = top;
    for i in 0..files {
        if per_dir > 0 && i % per_dir == 0 {
            if dir != top {
                fs.forget(dir, 1);
            }
            dir = mk(&mut fs, top, format!("d{}", i / per_dir).as_bytes(), Kind::Dir, 0o755)?;
        }
        let name = if per_dir > 0 { i % per_dir } else { i };
        let f = mk(&mut fs, dir, format!("f{name}").as_bytes(), Kind::File, 0o644)?;
        // Distinct bytes per file, so no two files' content is the same.
        let mut data = [b'.'; 100];
        data[..20].copy_from_slice(format!("{i:>20}").as_bytes());
        fs.write(f, 0, &data).map_err(|e| format!("write: {e:?}"))?;
        fs.forget(f, 1);
        if (i + 1) % BATCH == 0 {
            fs.checkpoint().map_err(|e| format!("checkpoint: {e}"))?;
            let s = t0.elapsed().as_secs_f64();
            eprintln!("make_tree: {} of {files} files, {s:.0} s", i + 1);
        }
    }
    if dir != top {
        fs.forget(dir, 1);
    }
    fs.forget(top, 1);
    fs.close().map_err(|e| format!("close: {e}"))
}
