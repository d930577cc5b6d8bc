//! The remote objects' seeds are valid objects (their checksums fixed up as the targets do),
//! so fuzzing starts from inputs that reach every field.

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
