//! A pinned committed state (`pinned.rs`) is read without the engine while the store goes
//! on changing: files deleted and checkpoints taken meanwhile do not punch the blocks it
//! reaches, so a scrub of it finds every block intact; once the pin goes, they are punched.

use scion_fs::Kind;

mod common;
use common::{new_store, read_all};

#[test]
fn a_pinned_state_outlives_the_changes_after_it() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let data: Vec<u8> = (0..1 << 20).map(|i| (i % 253) as u8 + 1).collect();
    for name in ["a", "b"] {
        let f = fs
            .mknod(root, name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[])
            .unwrap()
            .ino;
        fs.write(f, 0, &data).unwrap();
    }
    let pinned = fs.pin_committed().unwrap();
    let host = scion_store::os_host();
    let sb = scion_store::Superblock::read(&host, &store).unwrap();
    let packs = scion_store::BlockStore::open(&host, &store, sb.pack, sb.pack_end, false).unwrap();
    let before = packs.allocated_bytes().unwrap();
    // The store changes under the pin: a file deleted, another rewritten, checkpoints that
    // free their old blocks (and would punch them at once: punch_later is off here).
    fs.unlink(root, b"a").unwrap();
    let b = fs.lookup(root, b"b").unwrap().ino;
    fs.write(b, 0, &vec![7u8; 1 << 20]).unwrap();
    fs.checkpoint().unwrap();
    fs.checkpoint().unwrap();
    assert!(fs.unpunched_blocks() >= 32, "the freed blocks wait for the pin");
    let rep = pinned.scrub();
    assert_eq!(rep.damaged_total, 0, "{rep}");
    assert!(rep.blocks >= 32, "{rep}");
    // The pin goes: the next checkpoint punches what waited.
    drop(pinned);
    fs.checkpoint().unwrap();
    assert_eq!(fs.unpunched_blocks(), 0);
    let after = packs.allocated_bytes().unwrap();
    // Both old files' megabytes went back to the host; the new one took one.
    assert!(after + (1 << 19) < before, "{before} -> {after} bytes allocated");
    assert_eq!(read_all(&mut fs, b), vec![7u8; 1 << 20]);
    // The engine's own scrub (pin and walk at once) sees the new state, clean.
    assert_eq!(fs.scrub().unwrap().damaged_total, 0);
}

/// Pinning an idle volume's committed state commits nothing (`scion status`, `diff` and the
/// like on an idle mount write nothing and wait for no fsync); after any change, even one
/// the journal carries (a small overwrite) or a count alone, it checkpoints first, and the
/// pinned state holds the change.
#[test]
fn pinning_an_idle_volume_writes_nothing() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.write(f, 0, &vec![3u8; 300_000]).unwrap();
    drop(fs.pin_committed().unwrap());
    let g0 = fs.status_facts().generation;
    let w0 = fs.status_facts().written;
    drop(fs.pin_committed().unwrap());
    drop(fs.pin_committed().unwrap());
    let (g1, w1) = (fs.status_facts().generation, fs.status_facts().written);
    assert_eq!(g1, g0, "pins of an idle volume checkpointed");
    assert_eq!((w1.meta, w1.journal, w1.data), (w0.meta, w0.journal, w0.data));
    // A small overwrite (carried in the journal at checkpoints): the next pin commits it.
    fs.write(f, 100, b"changed").unwrap();
    let pinned = fs.pin_committed().unwrap();
    assert_eq!(fs.status_facts().generation, g0 + 1);
    drop(pinned);
    drop(fs.pin_committed().unwrap());
    assert_eq!(fs.status_facts().generation, g0 + 1, "carried, then idle again");
    // A clone: counts change (its root shared); the pin commits, then is idle again.
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.clone_dir(d, root, b"c", &[], b"/d").unwrap();
    drop(fs.pin_committed().unwrap());
    let g2 = fs.status_facts().generation;
    assert!(g2 > g0 + 1);
    drop(fs.pin_committed().unwrap());
    assert_eq!(fs.status_facts().generation, g2);
    assert_eq!(read_all(&mut fs, f)[100..107], *b"changed");
    // A view (diff, versions) folds the overwrite the journal still carries into the trees
    // it reads; then the volume is idle, and a view takes no checkpoint either.
    let mut v = fs.view().unwrap();
    fs.end_view(&mut v);
    assert_eq!(fs.status_facts().generation, g2 + 1, "the carried overwrite folded for the view");
    let mut v = fs.view().unwrap();
    fs.end_view(&mut v);
    assert_eq!(fs.status_facts().generation, g2 + 1, "a view of an idle volume checkpointed");
    fs.write(f, 200, b"again").unwrap();
    fs.checkpoint().unwrap(); // carried, not folded
    let g3 = fs.status_facts().generation;
    let mut v = fs.view().unwrap();
    assert_eq!(fs.status_facts().generation, g3 + 1, "the carried change folded for the view");
    let vf = v.lookup(v.root(), b"f").unwrap().ino;
    assert_eq!(read_all(&mut v, vf)[200..205], *b"again");
    fs.end_view(&mut v);
    let mut v = fs.view().unwrap();
    fs.end_view(&mut v);
    assert_eq!(fs.status_facts().generation, g3 + 1);
}
