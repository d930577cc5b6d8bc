//! Files whose chunks are blocks of remote packs (a pull, issue 41), driven as a library:
//! the blocks read through the store's `RemotePacks` (here a map standing in for the object
//! store, which `tests/mount/test_remote_trees.py` runs for real); the journal replays an
//! attachment after a crash; a block twice in a tree holds two references, and removing
//! one file leaves the other readable; a small overwrite patches over a remote block and a
//! rewrite replaces it; repack leaves remote blocks where they are; check counts them, clean.

use scion_fs::{Fs, Kind};
use scion_store::host::HostFile;
use scion_store::{BlockKind, BlockPtr, RemotePacks, REMOTE_PACK_FIRST};
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

mod common;
use common::{committed, new_store, open, read_all};

const CHUNK: usize = 64 << 10;

/// Remote pack `REMOTE_PACK_FIRST`'s bytes, by offset.
struct Remote(BTreeMap<u64, Vec<u8>>);

struct Pack(Arc<Remote>);

impl HostFile for Pack {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        buf.fill(0);
        for (&at, b) in self.0 .0.range(..offset + buf.len() as u64) {
            let (from, to) = (at.max(offset), (at + b.len() as u64).min(offset + buf.len() as u64));
            if from < to {
                buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(&b[(from - at) as usize..(to - at) as usize]);
            }
        }
        Ok(())
    }
    fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0 .0.iter().last().map_or(0, |(a, b)| a + b.len() as u64))
    }
    fn set_len(&self, _: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn punch_hole(&self, _: u64, _: u64) -> io::Result<()> {
        Ok(())
    }
}

struct Packs(Arc<Remote>);

impl RemotePacks for Packs {
    fn pack(&self, id: u32) -> Option<Arc<dyn HostFile>> {
        (id == REMOTE_PACK_FIRST).then(|| Arc::new(Pack(self.0.clone())) as Arc<dyn HostFile>)
    }
}

/// Three blocks: a whole chunk, another, and a short tail; their pointers.
fn remote() -> (Arc<Remote>, Vec<BlockPtr>) {
    let blocks: Vec<Vec<u8>> = vec![(0..CHUNK).map(|i| (i % 251) as u8 + 1).collect(), vec![7u8; CHUNK], b"the tail".to_vec()];
    let mut map = BTreeMap::new();
    let mut ptrs = Vec::new();
    let mut at = 0u64;
    for b in blocks {
        ptrs.push(BlockPtr { addr: BlockPtr::make_addr(REMOTE_PACK_FIRST, at), len: b.len() as u32, kind: BlockKind::Data, hash: *blake3::hash(&b).as_bytes() });
        at += (b.len() as u64).div_ceil(4096) * 4096;
        map.insert(at - (b.len() as u64).div_ceil(4096) * 4096, b);
    }
    (Arc::new(Remote(map)), ptrs)
}

fn attach(fs: &mut Fs, r: &Arc<Remote>) {
    fs.block_store().set_remote(Arc::new(Packs(r.clone())));
}

#[test]
fn remote_blocks_read_replay_share_and_stay_put() {
    let (_tmp, store, mut fs) = new_store();
    let (r, p) = remote();
    attach(&mut fs, &r);
    let root = fs.root();
    let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let g = fs.mknod(root, b"g", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.attach_chunk(f, 0, p[0], false).unwrap();
    fs.attach_chunk(f, 1, p[1], false).unwrap();
    fs.attach_chunk(f, 2, p[2], false).unwrap();
    // The same block in another file: a second reference.
    fs.attach_chunk(g, 0, p[0], true).unwrap();
    let want: Vec<u8> = [r.0[&0].clone(), vec![7u8; CHUNK], b"the tail".to_vec()].concat();
    assert_eq!(read_all(&mut fs, f), want);
    // A local block is refused: attach_chunk is for remote ones.
    let local = BlockPtr { addr: BlockPtr::make_addr(0, 0), ..p[0] };
    assert!(fs.attach_chunk(g, 1, local, false).is_err());

    // A crash before any checkpoint (the journal synced, as an fsync does): the journal
    // replays the attachments.
    fs.fsync().unwrap();
    drop(fs);
    let mut fs = open(&store);
    attach(&mut fs, &r);
    let root = fs.root();
    let f = fs.lookup(root, b"f").unwrap().ino;
    assert_eq!(read_all(&mut fs, f), want, "after replay");
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.remote_blocks, 3, "{rep}");

    // One reference goes: the other file still reads.
    fs.unlink(root, b"g").unwrap();
    fs.checkpoint().unwrap();
    committed(&store);
    assert_eq!(read_all(&mut fs, f), want);

    // A small overwrite patches over the remote block; a whole rewrite replaces it.
    fs.write(f, 100, b"local").unwrap();
    fs.write(f, CHUNK as u64, &vec![9u8; CHUNK]).unwrap();
    let mut now = want.clone();
    now[100..105].copy_from_slice(b"local");
    now[CHUNK..2 * CHUNK].fill(9);
    assert_eq!(read_all(&mut fs, f), now);
    fs.checkpoint().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.remote_blocks, 2, "{rep}");

    // Repack moves none of a pulled file's blocks.
    let moved = fs.repack(root, u64::MAX).unwrap();
    assert_eq!(moved.moved_bytes, 0, "{moved:?}");
    drop(fs);
    let mut fs = open(&store);
    attach(&mut fs, &r);
    let root = fs.root();
    let f = fs.lookup(root, b"f").unwrap().ino;
    assert_eq!(read_all(&mut fs, f), now, "after a remount");
    committed(&store);
}

#[test]
fn without_its_remote_a_remote_block_reads_as_an_error_not_zeros() {
    let (_tmp, _store, mut fs) = new_store();
    let (_r, p) = remote();
    let root = fs.root();
    let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.attach_chunk(f, 0, p[0], false).unwrap();
    assert!(fs.read(f, 0, 4096).is_err());
}
