//! The remote objects' seeds are valid objects (their checksums fixed up as the targets do),
//! so fuzzing starts from inputs that reach every field. `cargo test --release -p
//! scion-fuzzing --test remote_seeds -- --ignored` writes the tree object's seed again
//! (after a change of its format).

use std::path::Path;

fn seed(target: &str, name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target).join(name);
    let mut b = std::fs::read(p).unwrap();
    let n = b.len() - 4;
    let crc = crc32c::crc32c(&b[..n]);
    b[n..].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn remote_seeds_decode() {
    use scion_remote::layout::{Manifest, PackIndex, TreeObject};
    assert_eq!(PackIndex::decode(&seed("remote_pack_index", "seed-two-blocks")).unwrap().entries.len(), 2);
    assert_eq!(TreeObject::decode(&seed("remote_tree_object", "seed-two-blocks")).unwrap().blocks.len(), 2);
    assert_eq!(Manifest::decode(&seed("remote_manifest", "seed-one")).unwrap().name, "debian-12");
    let att = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/attachments_file/seed-payload")).unwrap();
    assert_eq!(scion_fs::records::attachments::decode_payload(&att).unwrap().len(), 2);
}

/// A tree object of one file of three chunks naming two blocks, as a push makes them.
fn tree_seed() -> Vec<u8> {
    use scion_fs::stream::{write_header, Frame, Meta, StreamWriter};
    use scion_remote::layout::{TreeBlock, TreeObject};
    let mut out = Vec::new();
    write_header(&mut out, 0).unwrap();
    let mut w = StreamWriter::new(out);
    let meta = Meta { perm: 0o644, uid: 0, gid: 0, mtime_sec: 0, mtime_nsec: 0, xattrs: Vec::new() };
    w.put(&Frame::Begin { base: None, root: [9; 32], name: b"v1".to_vec(), entries: 0, bytes: 0 }).unwrap();
    w.put(&Frame::File { path: b"f".to_vec(), size: 3 << 16, fresh: true, meta }).unwrap();
    for (i, h) in [[2u8; 32], [1; 32], [2; 32]].iter().enumerate() {
        w.put(&Frame::Block { offset: (i as u64) << 16, hash: *h }).unwrap();
    }
    let stream = w.finish([9; 32]).unwrap();
    let t = TreeObject {
        root: [9; 32],
        packs: vec![([7; 32], 3 * 4096 + 65536)],
        blocks: vec![
            TreeBlock { hash: [1; 32], pack: 0, slot: 0, offset: 0, len: 10, stored: 10 },
            TreeBlock { hash: [2; 32], pack: 0, slot: 1, offset: 4096, len: 65536, stored: 30000 },
        ],
        stream,
    };
    t.encode().unwrap()
}

#[test]
#[ignore]
fn make_seeds() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/remote_tree_object/seed-two-blocks");
    std::fs::write(p, tree_seed()).unwrap();
}
