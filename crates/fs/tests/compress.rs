//! Compression of old versions: blocks only snapshots hold (file data, and the directory
//! tree nodes where small files live inline) are compressed and relocated;
//! snapshots and live files read the same bytes before and after, across a reopen and a
//! crash; blocks the live tree shares and incompressible blocks stay; the space comes back
//! to the host; destroying the snapshot frees the compressed forms; a flipped bit in a
//! compressed block is an error, never wrong bytes.

use scion_fs::{Fs, Ino, Kind};
use std::path::Path;

mod common;
use common::{committed, mkfile, new_store, open, read_all};

const CHUNK: usize = 64 << 10;

/// Text-like bytes that zstd shrinks several times over.
fn text(seed: usize, len: usize) -> Vec<u8> {
    let words = ["scion ", "snapshot ", "block ", "tree ", "clone ", "version ", "old ", "\n"];
    let mut out = Vec::with_capacity(len);
    let mut i = seed;
    while out.len() < len {
        out.extend_from_slice(words[(i * 7 + i / 3) % words.len()].as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Bytes zstd cannot shrink (a simple xorshift stream).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn allocated(store: &Path) -> u64 {
    let host = scion_store::os_host();
    let sb = scion_store::Superblock::read(&host, store).unwrap();
    scion_store::BlockStore::open(&host, store, sb.pack, sb.pack_end, false)
        .unwrap()
        .allocated_bytes()
        .unwrap()
}

fn file(fs: &mut Fs, path: &str) -> Ino {
    fs.resolve_path(path.as_bytes()).unwrap()
}

struct Setup {
    old: Vec<(String, Vec<u8>)>,
    new: Vec<(String, Vec<u8>)>,
}

/// Small files, inline in their directory's tree leaves.
const SMALL: usize = 300;

fn small(i: usize, gen: usize) -> Vec<u8> {
    text(i * 3 + gen * 1000, 600)
}

/// `/d` with a text file rewritten after a snapshot (its old blocks are the snapshot's
/// alone), a text file left as it was (shared with the live tree), a file of noise rewritten
/// (old blocks incompressible), a small file, and `/d/many` of `SMALL` small files rewritten
/// (the snapshot alone holds the old leaves of that directory's tree).
fn setup(fs: &mut Fs) -> Setup {
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let old = vec![
        ("rewritten".to_string(), text(1, 5 * CHUNK)),
        ("kept".to_string(), text(2, 3 * CHUNK)),
        ("noise".to_string(), noise(3, 2 * CHUNK)),
        ("small".to_string(), text(4, 700)),
    ];
    for (n, data) in &old {
        mkfile(fs, d, n, data);
    }
    let many = fs.mknod(d, b"many", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    for i in 0..SMALL {
        mkfile(fs, many, &format!("s{i:04}"), &small(i, 0));
    }
    fs.checkpoint().unwrap();
    fs.snapshot(d, b"s1", b"/d").unwrap();
    let new = vec![
        ("rewritten".to_string(), text(5, 5 * CHUNK)),
        ("kept".to_string(), old[1].1.clone()),
        ("noise".to_string(), noise(6, 2 * CHUNK)),
        ("small".to_string(), old[3].1.clone()),
    ];
    for (n, data) in [&new[0], &new[2]] {
        let f = file(fs, &format!("/d/{n}"));
        fs.write(f, 0, data).unwrap();
    }
    for i in 0..SMALL {
        let f = file(fs, &format!("/d/many/s{i:04}"));
        fs.write(f, 0, &small(i, 1)).unwrap();
    }
    fs.checkpoint().unwrap();
    Setup { old, new }
}

fn verify(fs: &mut Fs, s: &Setup) {
    for (n, data) in &s.old {
        let f = file(fs, &format!("/d/.snapshot/s1/{n}"));
        assert!(read_all(fs, f) == *data, "snapshot's {n} differs");
    }
    for (n, data) in &s.new {
        let f = file(fs, &format!("/d/{n}"));
        assert!(read_all(fs, f) == *data, "live {n} differs");
    }
    for i in 0..SMALL {
        let f = file(fs, &format!("/d/.snapshot/s1/many/s{i:04}"));
        assert!(read_all(fs, f) == small(i, 0), "snapshot's small file {i} differs");
        let f = file(fs, &format!("/d/many/s{i:04}"));
        assert!(read_all(fs, f) == small(i, 1), "live small file {i} differs");
    }
}

/// Which of a file's blocks are relocated.
fn relocated(fs: &mut Fs, path: &str) -> Vec<bool> {
    let f = file(fs, path);
    let chunks = fs.stored_chunks(f).unwrap();
    chunks.iter().map(|(_, c)| fs.relocation(&c.block).is_some()).collect()
}

#[test]
fn blocks_only_snapshots_hold_are_compressed_and_read_back() {
    let (_tmp, store, mut fs) = new_store();
    let s = setup(&mut fs);
    let before = allocated(&store);

    let r = fs.compress_old(u64::MAX, 3).unwrap();
    // The rewritten text file's 5 old blocks, and the old leaves of /d/many (tens of KiB of
    // inline text); not the noise file's 2 old blocks, nor the kept file's, which the live
    // tree shares.
    assert_eq!(relocated(&mut fs, "/d/.snapshot/s1/rewritten"), vec![true; 5]);
    assert_eq!(relocated(&mut fs, "/d/.snapshot/s1/noise"), vec![false; 2]);
    assert_eq!(relocated(&mut fs, "/d/.snapshot/s1/kept"), vec![false; 3]);
    assert_eq!(relocated(&mut fs, "/d/kept"), vec![false; 3]);
    assert!(r.compressed >= 5 + 3 && r.incompressible >= 2 && r.left == 0, "{r:?}");
    assert_eq!(r.candidates, r.compressed + r.incompressible, "{r:?}");
    assert!(r.bytes_after * 4 < r.bytes_before, "{r:?}");
    verify(&mut fs, &s);
    let rep = committed(&store);
    assert_eq!(rep.relocated_blocks, r.compressed, "{rep}");
    let after = allocated(&store);
    assert!(
        before - after >= r.bytes_before - r.bytes_after - 64 * 1024,
        "space given back: {before} -> {after}, {r:?}"
    );

    // Nothing left to do; the noise is not tried again.
    let r2 = fs.compress_old(u64::MAX, 3).unwrap();
    assert_eq!((r2.candidates, r2.compressed), (0, 0), "{r2:?}");

    // Kept across a clean reopen and a crash (no close).
    fs.close().unwrap();
    let mut fs = open(&store);
    verify(&mut fs, &s);
    drop(fs);
    let mut fs = open(&store);
    verify(&mut fs, &s);
    assert_eq!(committed(&store).relocated_blocks, r.compressed);

    // Destroying the snapshot frees the compressed forms with the blocks.
    let snap = file(&mut fs, "/d/.snapshot/s1");
    fs.destroy(snap).unwrap();
    fs.checkpoint().unwrap();
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.relocated_blocks, 0, "{rep}");
    fs.close().unwrap();
    assert!(allocated(&store) < after, "the snapshot's space came back");
}

#[test]
fn budget_limits_a_pass_and_the_next_one_goes_on() {
    let (_tmp, store, mut fs) = new_store();
    let s = setup(&mut fs);
    let r = fs.compress_old(CHUNK as u64, 3).unwrap();
    assert_eq!(r.compressed + r.incompressible + r.left, r.candidates, "{r:?}");
    assert!(r.compressed + r.incompressible <= 5 && r.left > 0, "{r:?}");
    let all = r.candidates;
    let mut total = r.compressed;
    for _ in 0..10 {
        let r = fs.compress_old(2 * CHUNK as u64, 3).unwrap();
        total += r.compressed;
        if r.left == 0 {
            break;
        }
    }
    assert_eq!(relocated(&mut fs, "/d/.snapshot/s1/rewritten"), vec![true; 5]);
    assert_eq!(committed(&store).relocated_blocks, total);
    assert!(total >= 8 && total < all, "{total} of {all}");
    verify(&mut fs, &s);
    committed(&store);
    fs.close().unwrap();
}

#[test]
fn a_flipped_bit_in_a_compressed_block_is_an_error_not_wrong_bytes() {
    let (_tmp, store, mut fs) = new_store();
    let s = setup(&mut fs);
    let f = file(&mut fs, "/d/.snapshot/s1/rewritten");
    let chunks = fs.stored_chunks(f).unwrap();
    fs.compress_old(u64::MAX, 3).unwrap();
    let r = fs.relocation(&chunks[2].1.block).expect("relocated");
    fs.close().unwrap();

    let pack = scion_store::pack_path(&store, r.pack());
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes[r.offset() as usize + 16 + r.stored as usize / 2] ^= 0x10;
    std::fs::write(&pack, &bytes).unwrap();

    let mut fs = open(&store);
    let f = file(&mut fs, "/d/.snapshot/s1/rewritten");
    let e = fs.read(f, 2 * CHUNK as u64, 100).unwrap_err();
    assert_eq!(e, scion_fs::errno::EIO);
    // The other blocks still read right.
    assert!(fs.read(f, 0, CHUNK as u32).unwrap() == s.old[0].1[..CHUNK]);
    let rep = scion_fs::check::check_committed(&scion_store::os_host(), &store).unwrap();
    assert!(!rep.is_clean() && format!("{rep}").contains("compressed block"), "{rep}");
    fs.close().unwrap();
}

#[test]
fn the_background_pass_waits_for_quiet_and_goes_on_after_its_budget() {
    use std::time::Duration;
    let (_tmp, store, mut fs) = new_store();
    let s = setup(&mut fs);
    let (idle, every) = (Duration::from_millis(300), Duration::from_secs(3600));
    // Just changed: not quiet yet.
    assert!(fs.compress_begin_if_due(idle, every).unwrap().is_none());
    std::thread::sleep(idle);
    let plan = fs.compress_begin_if_due(idle, every).unwrap().expect("due");
    let r = plan.run(2 * CHUNK as u64, 3, 2, &mut |b| fs.compress_end(b)).unwrap();
    assert!(r.compressed + r.incompressible >= 2 && r.left > 0, "{r:?}");
    // Blocks were left: the next pass comes after `idle`, not `every`.
    assert!(fs.compress_begin_if_due(idle, every).unwrap().is_none());
    std::thread::sleep(idle);
    let plan = fs.compress_begin_if_due(idle, every).unwrap().expect("due again");
    let r = plan.run(u64::MAX, 3, 2, &mut |b| fs.compress_end(b)).unwrap();
    assert_eq!(r.left, 0, "{r:?}");
    // Done: the next one waits `every`.
    std::thread::sleep(idle);
    assert!(fs.compress_begin_if_due(idle, every).unwrap().is_none());
    assert_eq!(relocated(&mut fs, "/d/.snapshot/s1/rewritten"), vec![true; 5]);
    committed(&store);
    verify(&mut fs, &s);
    fs.close().unwrap();
}

/// A pass over more than a round of blocks goes in rounds: each round's compressed forms are
/// handed to `compress_end` (installed and committed) before the next round is read, so a
/// pass holds one round in memory whatever its budget; only the last round carries the
/// pass's candidates and what it left; the rounds' reports add up; everything reads back.
#[test]
fn a_large_pass_compresses_in_rounds() {
    use scion_fs::compress::ROUND;
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let len = (ROUND as usize * 5) / 2;
    let old = text(7, len);
    let f = mkfile(&mut fs, d, "big", &old);
    fs.checkpoint().unwrap();
    fs.snapshot(d, b"s1", b"/d").unwrap();
    fs.write(f, 0, &text(8, len)).unwrap();
    fs.checkpoint().unwrap();
    let plan = fs.compress_begin().unwrap();
    let (mut rounds, mut candidates_seen) = (Vec::new(), Vec::new());
    let r = plan
        .run(u64::MAX, 1, 2, &mut |b| {
            let r = fs.compress_end(b)?;
            // Installed and committed before the next round: its blocks read from their new place.
            rounds.push(r.compressed);
            candidates_seen.push(r.candidates);
            assert!(r.bytes_before <= ROUND, "a round of {} bytes", r.bytes_before);
            Ok(r)
        })
        .unwrap();
    assert_eq!(rounds.len(), 3, "{rounds:?}");
    assert_eq!(r.compressed, rounds.iter().sum::<u64>());
    // (Its data blocks and the content tree's nodes that hold them.)
    assert!(r.compressed > (len / CHUNK) as u64, "{r:?}");
    assert_eq!(candidates_seen[..2], [0, 0]);
    assert_eq!(r.candidates, r.compressed);
    assert_eq!(relocated(&mut fs, "/d/.snapshot/s1/big"), vec![true; len / CHUNK]);
    let f = file(&mut fs, "/d/.snapshot/s1/big");
    assert!(read_all(&mut fs, f) == old);
    fs.close().unwrap();
    committed(&store);
}
