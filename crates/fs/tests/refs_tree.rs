//! Reference counts in a tree of their own (format 18, checkpoint record version 3): a
//! checkpoint writes the counts that changed, not the whole table, so its cost follows the
//! change and not how much the store shares. A store whose record holds the flat table of
//! an older build is read and upgraded. `check` (which counts every pointer) is clean after
//! each step.

use scion_fs::records::checkpoint;
use scion_fs::{Fs, Ino, Kind};
use scion_store::{os_host, BlockStore, Superblock};
use std::path::Path;

mod common;
use common::{committed, mkfile, new_store, open, read_all};

const CHUNK: usize = 64 << 10;
/// Chunks of the shared file: its clone's content tree, every leaf copied, shares about
/// this many blocks with it (24 KB of flat table).
const CHUNKS: usize = 2048;

fn lookup(fs: &mut Fs, dir: Ino, name: &str) -> Ino {
    fs.lookup(dir, name.as_bytes()).unwrap().ino
}

/// Metadata a checkpoint after a new small file writes.
fn small_change(fs: &mut Fs, name: &str) -> u64 {
    fs.checkpoint().unwrap();
    let before = fs.status_facts().written.meta;
    let root = fs.root();
    mkfile(fs, root, name, b"a few bytes");
    fs.checkpoint().unwrap();
    fs.status_facts().written.meta - before
}

/// `d/f` of CHUNKS chunks, cloned as `c`, one chunk in sixteen of the clone's file rewritten:
/// nearly every block of the two files is shared.
fn shared_store(fs: &mut Fs) -> Vec<u8> {
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let data: Vec<u8> = (0..CHUNKS * CHUNK).map(|i| (i * 13 % 251) as u8 ^ (i >> 16) as u8).collect();
    mkfile(fs, d, "f", &data);
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(d, root, b"c", &[], b"/d").unwrap();
    let cf = lookup(fs, c, "f");
    let mut model = data;
    for i in (0..CHUNKS).step_by(16) {
        let piece = vec![i as u8 ^ 0x3c; CHUNK];
        fs.write(cf, (i * CHUNK) as u64, &piece).unwrap();
        model[i * CHUNK..(i + 1) * CHUNK].copy_from_slice(&piece);
    }
    fs.checkpoint().unwrap();
    model
}

fn check_files(fs: &mut Fs, model: &[u8]) {
    let root = fs.root();
    let c = lookup(fs, root, "c");
    let cf = lookup(fs, c, "f");
    assert!(read_all(fs, cf) == model, "the clone's file");
}

#[test]
fn a_checkpoint_writes_the_counts_that_changed() {
    let (_tmp, store, mut fs) = new_store();
    let alone = small_change(&mut fs, "x0");
    let model = shared_store(&mut fs);
    let rep = committed(&store);
    assert!(rep.shared_blocks as usize > CHUNKS * 9 / 10, "{rep}");
    let shared = small_change(&mut fs, "x1");
    // The flat table was 12 bytes a shared block, rewritten at each checkpoint.
    assert!(shared < alone + 4096, "{shared} bytes of metadata with {} shared blocks, {alone} alone", rep.shared_blocks);
    // Counts that change go in, and survive a reopen.
    let root = fs.root();
    let c = lookup(&mut fs, root, "c");
    let cf = lookup(&mut fs, c, "f");
    fs.setattr(cf, scion_fs::SetAttr { size: Some((CHUNKS * CHUNK / 2) as u64), ..Default::default() }).unwrap();
    fs.close().unwrap();
    committed(&store);
    let mut fs = open(&store);
    check_files(&mut fs, &model[..CHUNKS * CHUNK / 2]);
    let root = fs.root();
    let c = lookup(&mut fs, root, "c");
    fs.destroy(c).unwrap();
    fs.close().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.shared_blocks, 0, "{rep}");
}

/// Rewrites the committed checkpoint record of the store at `dir` (closed) as version 2, with
/// the flat table an older build wrote.
fn make_version_2(dir: &Path) {
    let host = os_host();
    let mut sb = Superblock::read(&host, dir).unwrap();
    let store = std::sync::Arc::new(BlockStore::open(&host, dir, sb.pack, sb.pack_end, true).unwrap());
    let rec = checkpoint::read_record(&store, sb.checkpoint.as_ref().unwrap()).unwrap();
    assert!(!rec.flat && rec.refs_root.is_some());
    let ptr = checkpoint::write_version_2(&store, &rec).unwrap();
    store.sync().unwrap();
    (sb.pack, sb.pack_end) = store.position();
    sb.checkpoint = Some(ptr);
    sb.write(&host, dir).unwrap();
    let again = checkpoint::read_record(&store, &ptr).unwrap();
    assert!(again.flat && again.refs == rec.refs && again.refs_root.is_none());
}

#[test]
fn a_flat_table_is_read_and_upgraded() {
    let (_tmp, store, mut fs) = new_store();
    let model = shared_store(&mut fs);
    fs.close().unwrap();
    let before = committed(&store);
    make_version_2(&store);
    // The open replays nothing and checkpoints: the tree is written whole then.
    let mut fs = open(&store);
    check_files(&mut fs, &model);
    fs.close().unwrap();
    let after = committed(&store);
    assert_eq!(after.shared_blocks, before.shared_blocks, "{after}");
    let host = os_host();
    let sb = Superblock::read(&host, &store).unwrap();
    let st = std::sync::Arc::new(BlockStore::open(&host, &store, sb.pack, sb.pack_end, false).unwrap());
    let rec = checkpoint::read_record(&st, sb.checkpoint.as_ref().unwrap()).unwrap();
    assert!(!rec.flat && rec.refs_root.is_some() && rec.refs.len() as u64 >= after.shared_blocks);
    drop(st);
    let mut fs = open(&store);
    let alone = small_change(&mut fs, "y0");
    assert!(alone < 64 << 10, "{alone} bytes of metadata after the upgrade");
    fs.close().unwrap();
    committed(&store);
}
