//! `scion status` counts what the store gives the host (issue 37): the bytes of every write
//! to a pack or a journal file, by kind, are the bytes the host was given. Checked on a
//! simulated host, which logs every write, over small files, syncs small and large (the
//! journal's zeros ahead of small syncs only), a large file and checkpoints.

use scion_fs::{Fs, MountOptions};
use scion_store::Host;
use scion_store::sim::{HostOp, SimHost};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod common;
use common::mkfile;

fn bytes(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + seed * 13) % 251) as u8 + 1).collect()
}

/// Bytes written to each file of the log, by path (files created before it by `names`).
fn written_by_path(log: &[HostOp], names: &HashMap<u64, PathBuf>) -> HashMap<PathBuf, u64> {
    let mut names = names.clone();
    let mut out: HashMap<PathBuf, u64> = HashMap::new();
    for op in log {
        match op {
            HostOp::Create { path, ino } => {
                names.insert(*ino, path.clone());
            }
            HostOp::Write { ino, data, .. } => {
                let path = names.get(ino).cloned().unwrap_or_else(|| PathBuf::from(format!("#{ino}")));
                *out.entry(path).or_default() += data.len() as u64;
            }
            _ => {}
        }
    }
    out
}

#[test]
fn status_counts_every_byte_given_to_the_packs_and_the_journal() {
    let host = SimHost::default();
    let dir = Path::new("/store");
    Fs::create(&(Arc::new(host.clone()) as Host), dir).unwrap();
    let opts = MountOptions { holder: "host_bytes".into(), host: Arc::new(host.clone()) as Host };
    let mut fs = Fs::open(dir, opts).unwrap();
    let names: HashMap<u64, PathBuf> = host.image().names().map(|(p, i)| (i, p.clone())).collect();
    let w0 = fs.status_facts().written;
    host.record();

    let root = fs.root();
    // Small files with scattered names (their bytes journaled), a small sync now and then.
    for i in 0..600usize {
        mkfile(&mut fs, root, &format!("{:08x}", i.wrapping_mul(2_654_435_761) % 1_000_003), &bytes(1500, i));
        if i % 100 == 99 {
            fs.fsync().unwrap();
        }
    }
    // A burst: 1.5 MB of records made durable by one sync.
    for i in 0..1000usize {
        mkfile(&mut fs, root, &format!("b{i}"), &bytes(1500, i + 7));
    }
    fs.fsync().unwrap();
    // A large file, in 4 KiB writes, then a checkpoint and more small syncs into the next
    // journal.
    let big = mkfile(&mut fs, root, "big", &[]);
    for k in 0..100u64 {
        fs.write(big, k * 4096, &bytes(4096, k as usize)).unwrap();
    }
    fs.checkpoint().unwrap();
    for i in 0..50usize {
        mkfile(&mut fs, root, &format!("s{i}"), &bytes(300, i));
        fs.fsync().unwrap();
    }
    fs.checkpoint().unwrap();

    let w = fs.status_facts().written;
    let by_path = written_by_path(&host.take_log(), &names);
    let under = |sub: &str| -> u64 {
        by_path.iter().filter(|(p, _)| p.starts_with(dir.join(sub))).map(|(_, n)| n).sum()
    };
    let (packs, journal) = (under("packs"), under("journal"));
    assert!(journal > 0 && packs > 0, "{by_path:?}");
    assert_eq!(w.journal - w0.journal, journal, "journal bytes counted against written: {by_path:?}");
    let counted_packs = (w.data - w0.data) + (w.meta - w0.meta) + (w.repack - w0.repack) + (w.compress - w0.compress);
    assert_eq!(counted_packs, packs, "pack bytes counted against written: {by_path:?}");
}
