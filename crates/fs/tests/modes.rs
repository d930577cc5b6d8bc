//! The journaling modes a cube can have, at the engine (`Fs::set_journal_data`,
//! `Fs::set_journaled`): where a write's bytes go. Their crash guarantees are the
//! crash-state harness's ("cubes and the root").

mod common;
use common::*;
use scion_fs::ROOT_INO;

fn pack_bytes(store: &std::path::Path) -> u64 {
    std::fs::read_dir(store.join("packs"))
        .unwrap()
        .map(|e| {
            use std::os::unix::fs::MetadataExt;
            e.unwrap().metadata().unwrap().blocks() * 512
        })
        .sum()
}

#[test]
fn mode_data_puts_whole_chunks_in_the_journal_and_nojournal_puts_nothing_there() {
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    // ordered (the default): whole chunks go ahead to the packs, the journal names them.
    let (_t, store, mut fs) = new_store();
    let (j0, p0) = (fs.journal_len(), pack_bytes(&store));
    mkfile(&mut fs, ROOT_INO, "f", &data);
    fs.fsync().unwrap();
    assert!(fs.journal_len() - j0 < 64 << 10, "ordered journaled {} bytes", fs.journal_len() - j0);
    assert!(pack_bytes(&store) - p0 >= 1 << 20);
    fs.close().unwrap();
    // data: the bytes go into the journal; the packs get them at the checkpoint.
    let (_t, store, mut fs) = new_store();
    fs.set_journal_data(true);
    let (j0, p0) = (fs.journal_len(), pack_bytes(&store));
    let f = mkfile(&mut fs, ROOT_INO, "f", &data);
    fs.fsync().unwrap();
    assert!(fs.journal_len() - j0 >= 1 << 20, "data journaled {} bytes", fs.journal_len() - j0);
    assert!(pack_bytes(&store) - p0 < 64 << 10, "data wrote {} bytes ahead", pack_bytes(&store) - p0);
    drop(fs); // a crash: the journal gives it back
    let mut fs = open(&store);
    let f2 = lookup(&mut fs, ROOT_INO, "f").unwrap();
    assert_eq!(read_all(&mut fs, f2), data);
    let _ = f;
    fs.close().unwrap();
    committed(&store);
    // nojournal: nothing in the journal; a checkpoint (fsync) makes it durable.
    let (_t, store, mut fs) = new_store();
    fs.set_journaled(false).unwrap();
    let j0 = fs.journal_len();
    mkfile(&mut fs, ROOT_INO, "f", &data);
    mkfile(&mut fs, ROOT_INO, "g", b"small");
    assert_eq!(fs.journal_len(), j0);
    fs.fsync().unwrap();
    mkfile(&mut fs, ROOT_INO, "later", b"lost at the crash");
    drop(fs);
    let mut fs = open(&store);
    let f2 = lookup(&mut fs, ROOT_INO, "f").unwrap();
    assert_eq!(read_all(&mut fs, f2), data);
    assert!(lookup(&mut fs, ROOT_INO, "later").is_err());
    fs.close().unwrap();
    committed(&store);
}

/// Switching from `nojournal` back to a journaled mode checkpoints first: an fsync after the
/// switch keeps what was written before it (a file written unjournaled and fsynced after the
/// switch survives a crash), and a file made after the switch in a directory made before it
/// replays (before, replay failed: the directory was in no checkpoint and in no journal).
#[test]
fn turning_the_journal_on_again_keeps_what_was_written_without_it() {
    let (_t, store, mut fs) = new_store();
    fs.set_journaled(false).unwrap();
    mkfile(&mut fs, ROOT_INO, "before", b"written unjournaled");
    let d = fs.mknod(ROOT_INO, b"d", scion_fs::Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.set_journaled(true).unwrap();
    mkfile(&mut fs, d, "after", b"journaled");
    fs.fsync().unwrap();
    drop(fs); // a crash: only what is committed and journaled comes back
    let mut fs = open(&store);
    let b = lookup(&mut fs, ROOT_INO, "before").unwrap();
    assert_eq!(read_all(&mut fs, b), b"written unjournaled");
    let d = lookup(&mut fs, ROOT_INO, "d").unwrap();
    let a = lookup(&mut fs, d, "after").unwrap();
    assert_eq!(read_all(&mut fs, a), b"journaled");
    fs.close().unwrap();
    committed(&store);
}
