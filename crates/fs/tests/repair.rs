//! `Fs::repair` (`scion check --repair`): a store whose file data is damaged is made clean
//! again by removing exactly the files that hold damaged blocks, in every place they are
//! (a clone sharing the block included), naming each; undamaged files are untouched; damage
//! a snapshot holds is named and left.

mod common;
use common::*;
use scion_fs::ROOT_INO;
use std::path::Path;

/// Overwrites, in the packs of the store at `dir`, the 4 KiB where `data` begins.
fn damage(dir: &Path, data: &[u8]) {
    let mut hit = 0;
    for e in std::fs::read_dir(dir.join("packs")).unwrap() {
        let p = e.unwrap().path();
        let mut blob = std::fs::read(&p).unwrap();
        if let Some(at) = blob.windows(4096).position(|w| w == &data[..4096]) {
            blob[at..at + 4096].fill(0x5a);
            std::fs::write(&p, &blob).unwrap();
            hit += 1;
        }
    }
    assert!(hit > 0, "the data is in no pack");
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).rotate_left(i as u32 % 7)).collect()
}

#[test]
fn repair_removes_every_file_holding_damaged_data_and_nothing_else() {
    let (_tmp, store, mut fs) = new_store();
    let d = fs.mknod(ROOT_INO, b"d", scion_fs::Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let hurt = pattern(1, 300_000);
    let fine = pattern(2, 300_000);
    mkfile(&mut fs, d, "hurt", &hurt);
    mkfile(&mut fs, d, "fine", &fine);
    fs.checkpoint().unwrap();
    // A clone shares the damaged block; a snapshot holds it too.
    fs.clone_dir(d, ROOT_INO, b"c", &[], b"test").unwrap();
    let snap = fs.snapshot(d, b"s", b"/d").unwrap();
    fs.close().unwrap();
    damage(&store, &hurt);
    let host = scion_store::os_host();
    assert!(!scion_fs::check::check(&host, &store).unwrap().is_clean());

    let mut fs = open(&store);
    let rep = fs.repair().unwrap();
    let mut lost = rep.lost.clone();
    lost.sort();
    assert_eq!(lost, vec!["/c/hurt".to_string(), "/d/hurt".to_string()], "{rep:?}");
    assert_eq!(rep.left.len(), 1, "{rep:?}");
    assert!(rep.left[0].0.contains("/.snapshot/s/hurt"), "{rep:?}");
    let c = lookup(&mut fs, ROOT_INO, "c").unwrap();
    for dir in [d, c] {
        assert!(lookup(&mut fs, dir, "hurt").is_err());
        let f = lookup(&mut fs, dir, "fine").unwrap();
        assert_eq!(read_all(&mut fs, f), fine);
    }
    fs.close().unwrap();
    // The snapshot still holds the damaged block, so check still names it; once the
    // snapshot goes, the store is clean.
    assert!(!scion_fs::check::check(&host, &store).unwrap().is_clean());
    let mut fs = open(&store);
    fs.destroy_id(snap).unwrap();
    fs.close().unwrap();
    committed(&store);
}

#[test]
fn repair_of_a_clean_store_changes_nothing() {
    let (_tmp, store, mut fs) = new_store();
    let data = pattern(3, 100_000);
    mkfile(&mut fs, ROOT_INO, "f", &data);
    let rep = fs.repair().unwrap();
    assert!(rep.lost.is_empty() && rep.left.is_empty(), "{rep:?}");
    let f = lookup(&mut fs, ROOT_INO, "f").unwrap();
    assert_eq!(read_all(&mut fs, f), data);
    fs.close().unwrap();
    committed(&store);
}
