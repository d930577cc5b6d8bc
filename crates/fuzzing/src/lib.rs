//! One entry point per decoder of bytes that come from disk or from a user. Each must
//! return (an error is fine) for any input: no panic, no unbounded allocation, no hang.
//! `fuzz/` drives them with libFuzzer (`cargo +nightly fuzz run TARGET`); the corpus it keeps
//! in `fuzz/corpus/TARGET/` is replayed through them by this crate's test on every CI run.
//!
//! Checksums stand in front of most decoders, and random bytes almost never pass them, so
//! where an input's first byte is odd the entry point fixes the checksum up first: the
//! fuzzer then reaches the fields behind it.

use scion_fs::journal::{self, Journal, Record};
use scion_store::codec::{Reader, Writer};
use scion_store::host::OpenMode;
use scion_store::sim::SimHost;
use scion_store::{BlockKind, BlockPtr, BlockStore, Host, Superblock, PTR_LEN, SUPERBLOCK_SLOT};
use std::path::Path;
use std::sync::Arc;

/// The targets, by name (the names of `fuzz/fuzz_targets/*.rs` and `fuzz/corpus/*`).
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("superblock", superblock),
    ("tree_node", tree_node),
    ("journal_record", journal_record),
    ("journal_file", journal_file),
    ("pack_block", pack_block),
    ("inode_record", inode_record),
    ("ref_table", ref_table),
    ("control", control),
    ("template", template),
    ("chunk_patches", chunk_patches),
    ("chunk_layers", chunk_layers),
    ("ns_record", ns_record),
    ("checkpoint_record", checkpoint_record),
    ("schedules_file", schedules_file),
    ("scan_cache", scan_cache),
    ("send_stream", send_stream),
    ("mirrors_file", mirrors_file),
    ("cubes_file", cubes_file),
    ("intents_file", intents_file),
    ("hash_memo_file", hash_memo_file),
    ("remotes_file", remotes_file),
    ("apply_frames", apply_frames),
    ("nfs_hints", nfs_hints),
    ("nfs_handle", nfs_handle),
    ("remote_pack_index", remote_pack_index),
    ("remote_tree_object", remote_tree_object),
    ("remote_manifest", remote_manifest),
    ("attachments_file", attachments_file),
];

fn fix_up(data: &[u8]) -> bool {
    data.first().is_some_and(|b| b & 1 == 1)
}

/// A superblock slot (4 KiB; shorter inputs are padded with zeros).
pub fn superblock(data: &[u8]) {
    let mut slot = data.to_vec();
    slot.resize(SUPERBLOCK_SLOT, 0);
    if fix_up(data) {
        let crc = crc32c::crc32c(&slot[..SUPERBLOCK_SLOT - 4]);
        slot[SUPERBLOCK_SLOT - 4..].copy_from_slice(&crc.to_le_bytes());
    }
    let _ = Superblock::decode(&slot);
}

/// A tree node's payload (its block's checksum already verified).
pub fn tree_node(data: &[u8]) {
    let _ = scion_tree::Node::decode(data);
}

/// One journal record's payload.
pub fn journal_record(data: &[u8]) {
    // What decodes encodes to a record that decodes the same (a layer's runs, say, checked
    // on the way in are written back as they were).
    if let Ok(r) = Record::decode(data) {
        assert_eq!(Record::decode(&r.encode()).as_ref().ok(), Some(&r), "{r:?}");
    }
}

/// A journal file: a valid header, then the input as the record area. With the first byte
/// odd, the rest is read as `[flags u8][len u16][payload]...` and framed with valid
/// checksums (flag bit 0: MORE), so the framing and the record decoders are both reached.
pub fn journal_file(data: &[u8]) {
    let sim = SimHost::default();
    let host: Host = Arc::new(sim);
    let dir = Path::new("/s");
    host.create_dir_all(&dir.join("journal")).unwrap();
    let id = [7u8; 16];
    let (hlen, tag) = {
        let j = Journal::create(&host, dir, 3, &id).unwrap();
        (j.len, j.tag())
    };
    let body = if fix_up(data) {
        let mut out = Vec::new();
        let mut rest = &data[1..];
        while rest.len() >= 3 {
            let more = rest[0] & 1 == 1;
            let len = (u16::from_le_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
            let payload = &rest[3..3 + len];
            out.extend_from_slice(&journal::frame(payload, more, tag));
            out.extend_from_slice(payload);
            rest = &rest[3 + len..];
        }
        out
    } else {
        data.to_vec()
    };
    let f = host
        .open(
            &journal::journal_path(dir, 3, scion_store::FORMAT_VERSION),
            OpenMode::ReadWrite,
        )
        .unwrap();
    f.write_all_at(&body, hlen).unwrap();
    if let Ok(j) = journal::read(&host, dir, 3, &id, scion_store::FORMAT_VERSION) {
        assert_eq!(j.records.len(), j.op_start.len());
        assert!(
            j.op_start.first().is_none_or(|s| *s),
            "the first record must begin an operation"
        );
    }
}

/// A block pointer (as found in a parent node) and the pack bytes it points at, read and
/// verified through the block store as a mount reads them.
pub fn pack_block(data: &[u8]) {
    if data.len() < PTR_LEN {
        return;
    }
    let Ok(mut ptr) = BlockPtr::decode(&mut Reader::new(&data[..PTR_LEN], "fuzz pointer")) else {
        return;
    };
    // The block sits at offset 0 of pack 1, which holds the rest of the input.
    ptr.addr = BlockPtr::make_addr(1, 0);
    let mut bytes = data[PTR_LEN..].to_vec();
    if fix_up(data) && ptr.kind != BlockKind::Data && bytes.len() >= 16 {
        // A well-formed header over whatever payload follows.
        bytes[..4].copy_from_slice(b"SCBK");
        bytes[4] = ptr.kind as u8;
        bytes[5] = 0;
        let len = (bytes.len() - 16) as u32;
        bytes[8..12].copy_from_slice(&len.to_le_bytes());
        ptr.len = len;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..12]), &bytes[16..]);
        bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    }
    let sim = SimHost::default();
    let host: Host = Arc::new(sim);
    let dir = Path::new("/s");
    host.create_dir_all(&dir.join("packs")).unwrap();
    let store = BlockStore::open(&host, dir, 1, 0, true).unwrap();
    let f = host.open(&scion_store::pack_path(dir, 1), OpenMode::ReadWrite).unwrap();
    f.write_all_at(&bytes, 0).unwrap();
    let _ = store.read(&ptr);
    let _ = store.read_run(&[ptr, ptr]);
    // The same bytes as the compressed form of a relocated data block (format 8): its
    // pointer names a place that holds nothing, its relocation the bytes above.
    if bytes.len() >= 16 {
        let mut framed = bytes.clone();
        let stored = (framed.len() - 16) as u32;
        if fix_up(data) {
            framed[..4].copy_from_slice(b"SCBK");
            framed[4] = BlockKind::Data as u8;
            framed[5] = scion_store::relocate::CODEC_ZSTD;
            framed[8..12].copy_from_slice(&stored.to_le_bytes());
            let crc = crc32c::crc32c_append(crc32c::crc32c(&framed[..12]), &framed[16..]);
            framed[12..16].copy_from_slice(&crc.to_le_bytes());
        }
        f.write_all_at(&framed, 0).unwrap();
        let moved = BlockPtr {
            addr: BlockPtr::make_addr(1, 1 << 30),
            kind: BlockKind::Data,
            len: ptr.len.min(1 << 20),
            ..ptr
        };
        store.install_relocation(
            &moved,
            scion_store::Relocation {
                addr: BlockPtr::make_addr(1, 0),
                at: 0,
                stored,
            },
        );
        let _ = store.read(&moved);
        let _ = store.read_pages(&moved, &vec![0; (moved.len as usize).div_ceil(4096)], 0, 1);
        let _ = store.read_run(&[moved, ptr]);
    }
}

/// An inode record as a directory entry or the link table stores it (with two pointers
/// after it, as a record may name its content and summary roots). The first byte picks the
/// content pointer's kind (bit 0: a tree node, or the data block of a direct chunk) and how
/// many pointers the value has (bits 1-2: none, one or two), so every form of a file's
/// content is reached. What decodes must encode and decode to the same inode.
pub fn inode_record(data: &[u8]) {
    let Some((&pick, data)) = data.split_first() else {
        return;
    };
    let ptr = |kind| BlockPtr {
        addr: BlockPtr::make_addr(1, 4096),
        len: 100,
        kind,
        hash: [0; 32],
    };
    let content = ptr(if pick & 1 == 0 {
        BlockKind::Node
    } else {
        BlockKind::Data
    });
    let ptrs = [content, ptr(BlockKind::Node)];
    let n = (pick >> 1) as usize % 3;
    let mut r = Reader::new(data, "fuzz inode");
    if let Ok(i) = scion_fs::inode::Inode::decode_record(&mut r, &ptrs[..n]) {
        let mut w = Writer::new();
        i.encode_record(&mut w);
        let again = scion_fs::inode::Inode::decode_record(&mut Reader::new(&w.finish(), "fuzz inode"), &i.ptrs())
            .expect("an encoded record decodes");
        assert_eq!(again, i, "a record changes through encoding");
    }
}

/// The reference table of a checkpoint record.
pub fn ref_table(data: &[u8]) {
    let _ = scion_tree::RefTable::decode(&mut Reader::new(data, "fuzz refs"));
}

/// A control-socket message: a frame, a request and a reply frame (`scion_daemon::wire`).
/// A request that decodes re-encodes to one that decodes to the same operation.
pub fn control(data: &[u8]) {
    let _ = scion_daemon::wire::read_frame(&mut std::io::Cursor::new(data));
    if let Ok(req) = scion_daemon::wire::decode_request(data) {
        let encode = if req.settled { scion_daemon::wire::encode_settled_request } else { scion_daemon::wire::encode_request };
        let again = scion_daemon::wire::decode_request(&encode(&req.op, &req.device));
        assert_eq!(again, Ok(req), "a request changes through encoding");
    }
    let frame = scion_daemon::wire::decode_frame(data);
    // A stream part read borrowed is the part the full decoder reads.
    if let Some(bytes) = scion_daemon::wire::stream_part(data) {
        match frame {
            Ok(scion_daemon::wire::Frame::Part(scion_daemon::wire::Part::Stream(b))) => assert_eq!(b, bytes, "a stream part read two ways differs"),
            _ => panic!("a message taken for a stream part that does not decode as one"),
        }
    }
}

/// A scan cache file (`STORE/scan-cache/*`): what decodes encodes back to the same bytes,
/// up to where the damage began.
pub fn scan_cache(data: &[u8]) {
    use scion_daemon::scan_cache::{decode, ScanResult};
    let (records, clean) = decode(data);
    let mut w = scion_store::codec::Writer::new();
    w.raw(b"SCSC").u8(1);
    records.iter().for_each(|r: &ScanResult| r.encode(&mut w));
    let again = w.finish();
    if clean && !data.is_empty() {
        assert_eq!(again, data, "a clean cache file changes through encoding");
    } else if !records.is_empty() {
        assert!(data.starts_with(&again), "the records kept are not the file's first");
    }
    assert_eq!(decode(&again).0, records);
}

/// A `scion send` stream (header, zstd or not, a negotiated stream's offer, frames, end),
/// decoded as `scion receive` checks it before applying anything. Frames that decode encode
/// back to the same bytes. The input is also read as a receiver's answer to an offer (its
/// first byte the offer's size), which the sender checks.
pub fn send_stream(data: &[u8]) {
    if let Ok(frames) = scion::stream::decode_all(data) {
        if matches!(frames.first(), Some(scion::stream::Frame::Resume { .. })) {
            return; // the rest of a stream: its numbering starts where the first stopped
        }
        let mut w = scion::stream::StreamWriter::new(Vec::new());
        for f in &frames[..frames.len() - 1] {
            w.put(f).expect("writing to memory");
        }
        let root = match frames.last() {
            Some(scion::stream::Frame::End { root, .. }) => *root,
            f => panic!("a decoded stream that does not end with End: {f:?}"),
        };
        let body = w.finish(root).expect("writing to memory");
        let mut again = Vec::new();
        scion::stream::write_header(&mut again, 0).expect("writing to memory");
        again.extend_from_slice(&body);
        assert_eq!(scion::stream::decode_all(&again).map(|v| v.len()), Ok(frames.len()));
    }
    // The other half of a negotiation: a receiver's answer, for an offer of up to 64 blocks.
    if let Some((&n, rest)) = data.split_first() {
        let n = usize::from(n % 64);
        if let Ok(held) = scion::stream::read_answer(&mut &rest[..], n) {
            let mut again = Vec::new();
            scion::stream::write_answer(&mut again, &held).expect("writing to memory");
            assert_eq!(scion::stream::read_answer(&mut &again[..], n), Ok(held));
        }
    }
}

/// A clone template file.
pub fn template(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = scion::wire::Template::parse(text);
    }
}

/// The patches a file content value keeps beside its block (copy-on-abundant-write); what
/// decodes must re-encode to the same bytes and lay over a chunk without panicking.
pub fn chunk_patches(data: &[u8]) {
    if let Ok(p) = scion_fs::delta::Patches::decode(data) {
        assert_eq!(p.encode(), data, "patches re-encode differently");
        let mut chunk = Vec::new();
        p.apply(&mut chunk);
        assert_eq!(chunk.len(), p.end() as usize);
    }
    // The same bytes as a whole content value (patches, then page sums since format 6) over
    // a block whose length the first two bytes choose.
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let block = BlockPtr {
        addr: BlockPtr::make_addr(1, 4096),
        len: u32::from(u16::from_le_bytes(*len)).max(1),
        kind: BlockKind::Data,
        hash: [7; 32],
    };
    let v = scion_tree::Value::new(rest.to_vec(), vec![block]);
    if let Ok(c) = scion_fs::delta::StoredChunk::from_value(&v) {
        assert_eq!(c.to_value(), v, "a content value re-encodes differently");
    }
}

/// A layered file content value (format 16): the first byte says how many layer pointers
/// follow the block's (0-9), the next two bytes each give the block's and each layer's length,
/// the rest is the value's bytes. What decodes must re-encode to the same value, and its
/// layers, filled with bytes, must merge and lay over a chunk without panicking.
pub fn chunk_layers(data: &[u8]) {
    let Some((&n, mut rest)) = data.split_first() else {
        return;
    };
    let mut ptrs = Vec::new();
    for i in 0..=(n % 10) as u64 {
        let Some((len, r)) = rest.split_first_chunk::<2>() else {
            return;
        };
        rest = r;
        ptrs.push(BlockPtr {
            addr: BlockPtr::make_addr(1, 4096 * (i + 1)),
            len: u32::from(u16::from_le_bytes(*len)).max(1),
            kind: BlockKind::Data,
            hash: [i as u8; 32],
        });
    }
    let v = scion_tree::Value::new(rest.to_vec(), ptrs);
    let Ok(mut c) = scion_fs::delta::StoredChunk::from_value(&v) else {
        return;
    };
    assert_eq!(c.to_value(), v, "a content value re-encodes differently");
    let mut merged = scion_fs::delta::Patches::default();
    for l in &c.layers {
        let bytes: Vec<u8> = (0..l.block.len).map(|i| i as u8).collect();
        let p = scion_fs::delta::Patches::from_layer(&l.runs, &bytes).expect("runs the value checked");
        assert_eq!(p.to_layer(), (l.runs.clone(), bytes), "a layer's runs come back differently");
        for (o, d) in p.within(0, 1 << 16) {
            merged.write(o as u32, d);
        }
    }
    assert!(c.len() >= merged.end() as u64, "a chunk shorter than its layers' runs");
    c.patches = merged;
    let mut chunk = Vec::new();
    c.patches.apply(&mut chunk);
    assert_eq!(chunk.len(), c.patches.end() as usize);
}

/// A namespace record (a namespace table value). The first byte says how many pointers the
/// value carries (0-3, for a root record's content and summary and a link table); what
/// decodes must encode to the same value.
pub fn ns_record(data: &[u8]) {
    let Some((&pick, data)) = data.split_first() else {
        return;
    };
    let ptr = |i: u64| BlockPtr {
        addr: BlockPtr::make_addr(1, 4096 * (i + 1)),
        len: 100,
        kind: BlockKind::Node,
        hash: [i as u8; 32],
    };
    let ptrs: Vec<BlockPtr> = (0..(pick % 4) as u64).map(ptr).collect();
    let v = scion_tree::Value::new(data.to_vec(), ptrs);
    if let Ok(rec) = scion_fs::records::namespace::ns_from_value(&v) {
        let again = scion_fs::records::namespace::ns_to_value(&rec);
        let back = scion_fs::records::namespace::ns_from_value(&again).expect("an encoded record decodes");
        assert_eq!(
            scion_fs::records::namespace::ns_to_value(&back),
            again,
            "a namespace record changes through encoding"
        );
    }
}

/// The schedules file (`STORE/schedules`): its two slots, then the payload alone. What
/// decodes encodes back to what decodes the same.
pub fn schedules_file(data: &[u8]) {
    use scion_fs::records::schedules;
    if let Ok(stored) = schedules::decode_file(data) {
        let slot = schedules::encode_slot(stored.seq, &stored.schedules).expect("a decoded state fits a slot");
        let back = schedules::decode_slot(&slot)
            .expect("an encoded slot decodes")
            .expect("a whole slot");
        assert_eq!(back, stored, "the schedules change through encoding");
    }
    if let Ok(list) = schedules::decode_payload(data) {
        assert_eq!(
            schedules::decode_payload(&schedules::encode_payload(&list)).ok(),
            Some(list)
        );
    }
}

/// The mirrors file (`STORE/mirrors`): what decodes re-encodes to the same mirrors, as a
/// file and as a payload.
pub fn mirrors_file(data: &[u8]) {
    use scion_fs::records::mirrors;
    if let Ok(stored) = mirrors::decode_file(data) {
        let again = mirrors::decode_payload(&mirrors::encode_payload(&stored.mirrors)).expect("re-encoded mirrors decode");
        assert_eq!(again, stored.mirrors, "the mirrors change through encoding");
    }
    if let Ok(list) = mirrors::decode_payload(data) {
        assert_eq!(mirrors::decode_payload(&mirrors::encode_payload(&list)).ok(), Some(list));
    }
}

/// The cube table (`STORE/cubes`): what decodes re-encodes to the same cubes, as a file and
/// as a payload.
pub fn cubes_file(data: &[u8]) {
    use scion_fs::records::cubes;
    if let Ok(stored) = cubes::decode_file(data) {
        let again = cubes::decode_payload(&cubes::encode_payload(&stored.cubes)).expect("re-encoded cubes decode");
        assert_eq!(again, stored.cubes, "the cubes change through encoding");
    }
    if let Ok(list) = cubes::decode_payload(data) {
        assert_eq!(cubes::decode_payload(&cubes::encode_payload(&list)).ok(), Some(list));
    }
}

/// The intents file (`STORE/intents`): what decodes re-encodes to the same intents, as a
/// file and as a payload.
pub fn intents_file(data: &[u8]) {
    use scion_fs::records::intents;
    if let Ok(stored) = intents::decode_file(data) {
        let again = intents::decode_payload(&intents::encode_payload(&stored.intents)).expect("re-encoded intents decode");
        assert_eq!(again, stored.intents, "the intents change through encoding");
    }
    if let Ok(list) = intents::decode_payload(data) {
        assert_eq!(intents::decode_payload(&intents::encode_payload(&list)).ok(), Some(list));
    }
}

/// A checkpoint record block and, from the same bytes, the lists its pages hold.
pub fn checkpoint_record(data: &[u8]) {
    let _ = scion_fs::records::checkpoint::decode_head(data, &"fuzz");
    let _ = scion_fs::records::checkpoint::decode_lists(data);
    let _ = scion_fs::records::checkpoint::decode_lists_v3(data);
    // A reference tree's entry (format 18): the first 8 bytes as its key, the rest its value.
    if data.len() >= 8 {
        if let Ok((addr, n)) = scion_tree::RefTable::decode_entry(&data[..8], &data[8..]) {
            let (k, v) = scion_tree::RefTable::entry_bytes(addr, n);
            assert_eq!((&k[..], &v[..]), (&data[..8], &data[8..]), "a reference entry re-encodes differently");
        }
    }
    // A relocation tree's value (the tree's nodes are the tree target's).
    if let Ok(r) = scion_store::Relocation::decode(data) {
        assert_eq!(scion_store::Relocation::decode(&r.encode()).ok(), Some(r));
    }
}

/// A receiver applying frames that decoded (`scion receive` after its checks; a stream's
/// checksums prove only that the sender meant them, not that they make sense). The input is
/// a small program (`apply_program`) of frames over a pool of names, sizes and metadata,
/// applied in batches to a clone in an engine on a simulated host, as the daemon applies
/// them. Whatever the frames, nothing outside the clone may change, the clone's content hash
/// must compute, and once the clone is destroyed (a receive that fails
/// is) and a checkpoint taken, `check` must be clean: no leaked block, no dangling entry.
pub fn apply_frames(data: &[u8]) {
    use scion_fs::{Fs, Kind, MountOptions, ROOT_INO};
    let host: Host = Arc::new(SimHost::default());
    let dir = Path::new("/store");
    Fs::create(&host, dir).expect("a store on the simulated host");
    let opts = MountOptions {
        holder: "fuzz".into(),
        host: host.clone(),
    };
    let mut fs = Fs::open(dir, opts).expect("the new store opens");
    // The base (files whole, patched, sparse; a symlink; a hard link), a bystander, and an
    // empty directory a full stream's clone starts from.
    let mk = |fs: &mut Fs, p: u64, name: &str, kind: Kind, target: &[u8]| {
        let a = fs.mknod(p, name.as_bytes(), kind, 0o755, 0, 1000, 1000, 0, target).expect("mknod");
        a.ino
    };
    let base = mk(&mut fs, ROOT_INO, "base", Kind::Dir, &[]);
    let sub = mk(&mut fs, base, "a", Kind::Dir, &[]);
    let f = mk(&mut fs, sub, "f", Kind::File, &[]);
    fs.write(f, 0, &[7u8; 150_000]).expect("write");
    fs.write(f, 70_000, b"patched").expect("write");
    let g = mk(&mut fs, base, "b", Kind::File, &[]);
    fs.write(g, 1 << 20, b"tail").expect("write");
    fs.link(g, sub, b"link-to-b").expect("link");
    mk(&mut fs, base, "s", Kind::Symlink, b"a/f");
    fs.setxattr(f, b"user.k", b"v", 0).expect("setxattr");
    let other = mk(&mut fs, ROOT_INO, "other", Kind::Dir, &[]);
    let o = mk(&mut fs, other, "keep", Kind::File, &[]);
    fs.write(o, 0, b"not the stream's").expect("write");
    let empty = mk(&mut fs, ROOT_INO, "empty", Kind::Dir, &[]);
    fs.checkpoint().expect("checkpoint");
    let before = (fs.content_hash_of(base).expect("hash"), fs.content_hash_of(other).expect("hash"));
    // The first byte: an increment (on a clone of the base) or a full tree; the frames in
    // their batches, or one at a time (a refused frame then stops only itself).
    let (incremental, one_by_one, program) = match data.split_first() {
        Some((b, rest)) => (b & 1 == 1, b & 2 == 2, rest),
        None => (false, false, data),
    };
    let from = if incremental { base } else { empty };
    let top = fs.clone_dir(from, ROOT_INO, b"recv", &[], b"/base").expect("clone");
    let block = *blake3::hash(&[7u8; 65536]).as_bytes();
    let _ = fs.find_blocks(&[block]);
    // (A receive stops at its first refused frame; going on here puts the engine through
    // more states, each of which must stay consistent.)
    let mut open = None;
    let mut batches = apply_program(program, block);
    if one_by_one {
        batches = batches.into_iter().flatten().map(|f| vec![f]).collect();
    }
    for batch in batches {
        open = fs.apply_frames(top, incremental.then_some(base), open.take(), batch).unwrap_or(None);
    }
    if let Err(e) = fs.content_hash_of(top) {
        panic!("the content hash of a tree the frames made: {e}");
    }
    let after = (fs.content_hash_of(base).expect("hash"), fs.content_hash_of(other).expect("hash"));
    assert_eq!(before, after, "frames applied to a clone changed what is outside it");
    fs.checkpoint().expect("checkpoint");
    let rep = scion_fs::check::check_committed(&host, dir).expect("check runs");
    assert!(rep.is_clean(), "after frames applied: {rep}");
    fs.destroy(top).expect("the clone a receive made is destroyed");
    fs.checkpoint().expect("checkpoint");
    drop(fs);
    let rep = scion_fs::check::check_committed(&host, dir).expect("check runs");
    assert!(rep.is_clean(), "after the clone the frames were applied to was destroyed: {rep}");
}

/// The frames a fuzz input stands for, in batches: each frame is an opcode byte then its
/// fields, each drawn from a small pool by one byte (names include `..`, `.snapshot`, empty
/// and over-long ones; offsets and sizes include the largest), kept if the stream's decoder
/// takes it.
pub fn apply_program(data: &[u8], block: [u8; 32]) -> Vec<Vec<scion_fs::stream::Frame>> {
    use scion_fs::stream::{Frame, Meta};
    const NAMES: &[&[u8]] = &[b"a", b"b", b"f", b"s", b"link-to-b", b"new", b"..", b".", b"", b".snapshot", b"x\0y"];
    const NUMS: &[u64] = &[0, 1, 7, 4095, 4096, 65535, 65536, 65537, 150_000, 1 << 20, 1 << 40, i64::MAX as u64, u64::MAX - 1, u64::MAX];
    let mut input = data.iter().copied();
    let mut byte = move || input.next();
    let mut batches = vec![Vec::new()];
    while let Some(op) = byte() {
        let mut pick = || usize::from(byte().unwrap_or(0));
        let path = |pick: &mut dyn FnMut() -> usize| {
            let n = 1 + pick() % 3;
            let names: Vec<Vec<u8>> = (0..n)
                .map(|_| match pick() {
                    255 => vec![b'n'; 300],
                    k => NAMES[k % NAMES.len()].to_vec(),
                })
                .collect();
            names.join(&b'/')
        };
        let num = |pick: &mut dyn FnMut() -> usize| NUMS[pick() % NUMS.len()];
        let meta = |pick: &mut dyn FnMut() -> usize| Meta {
            perm: (pick() as u16) << 4 | (pick() as u16 & 0xf),
            uid: [0, 1000, u32::MAX][pick() % 3],
            gid: [0, 1000, u32::MAX][pick() % 3],
            mtime_sec: [0, -1, 1_700_000_000, i64::MIN, i64::MAX][pick() % 5],
            mtime_nsec: [0, 999_999_999, 1_000_000_000, u32::MAX][pick() % 4],
            xattrs: match pick() % 5 {
                0 => vec![],
                1 => vec![(b"user.k".to_vec(), b"w".to_vec())],
                2 => vec![(b"system.posix_acl_access".to_vec(), vec![2, 0, 0, 0, 1])],
                3 => vec![(b"user.k".to_vec(), vec![1; 70_000])],
                _ => vec![(Vec::new(), b"v".to_vec())],
            },
        };
        let f = match op % 13 {
            0 => Frame::Delete { path: path(&mut pick) },
            1 => Frame::Dir { path: path(&mut pick) },
            2 => Frame::File {
                path: path(&mut pick),
                size: num(&mut pick),
                fresh: pick() & 1 == 1,
                meta: meta(&mut pick),
            },
            3 => Frame::Data {
                offset: num(&mut pick),
                bytes: vec![pick() as u8; [0, 1, 100, 4096, 65536, 70_000][pick() % 6]],
            },
            4 => Frame::Hole {
                offset: num(&mut pick),
                len: num(&mut pick),
            },
            5 => Frame::Symlink {
                path: path(&mut pick),
                target: [&b"a/f"[..], b"", b"/etc/passwd", b"../../other"][pick() % 4].to_vec(),
                meta: meta(&mut pick),
            },
            6 => Frame::Special {
                path: path(&mut pick),
                kind: pick() as u8 % 10,
                rdev: pick() as u32,
                meta: meta(&mut pick),
            },
            7 => Frame::Link {
                path: path(&mut pick),
                target: path(&mut pick),
            },
            8 => Frame::Copy {
                path: path(&mut pick),
                from: path(&mut pick),
            },
            9 => Frame::Meta {
                path: if pick() % 4 == 0 { Vec::new() } else { path(&mut pick) },
                meta: meta(&mut pick),
            },
            10 => Frame::Block {
                offset: num(&mut pick),
                hash: if pick() & 1 == 1 { block } else { [pick() as u8; 32] },
            },
            11 => Frame::End {
                frames: 0,
                hash: [0; 32],
                root: [0; 32],
            },
            _ => {
                batches.push(Vec::new());
                continue;
            }
        };
        // Only what the stream's decoder lets through reaches the engine (the daemon decodes
        // each batch): a frame it refuses is left out.
        let Ok(Some(f)) = scion_fs::stream::decode_frames(&scion_fs::stream::encode_frame(&f, 0)).map(|mut d| d.pop()) else {
            continue;
        };
        batches.last_mut().expect("one at least").push(f);
        if batches.len() > 64 || batches.iter().map(Vec::len).sum::<usize>() > 512 {
            break;
        }
    }
    batches
}


/// An NFS hints file (`STORE/nfs/hints`): what decodes encodes to bytes that decode the same.
/// Odd first byte: the checksum is fixed up.
pub fn nfs_hints(data: &[u8]) {
    use scion_nfs::hints::{decode, encode};
    let mut d = data.to_vec();
    if fix_up(data) && d.len() >= 32 {
        let n = d.len() - 32;
        let sum = *blake3::hash(&d[..n]).as_bytes();
        d[n..].copy_from_slice(&sum);
    }
    if let Ok(h) = decode(&d) {
        assert_eq!(decode(&encode(&h)).unwrap(), h, "hints change through encoding");
    }
}

/// An NFS file handle as a client sends it (after the crate's generation prefix): opened
/// under a fixed key, it names an inode only if that key's handle of the inode is these bytes.
pub fn nfs_handle(data: &[u8]) {
    use scion_nfs::{Handle, HandleKey};
    use scion_nfs::nfs3_server::vfs::FileHandle;
    let key = HandleKey::from_secret([7; 32]);
    if let Some(h) = Handle::from_bytes(data) {
        if let Some((graft, ino)) = key.open(&h) {
            assert_eq!(key.handle(graft, ino).as_bytes(), data, "a handle opened that the key did not make");
        }
    }
}

/// The hash memo kept across mounts (`STORE/hash-memo`): what decodes encodes back to the
/// same bytes.
pub fn hash_memo_file(data: &[u8]) {
    use scion_fs::records::hash_memo;
    let mut data = data.to_vec();
    // (An odd first byte: the trailer fixed up, so the fields behind it are reached.)
    if data.len() >= 32 && data[0] & 1 == 1 {
        let n = data.len() - 32;
        let sum = *blake3::hash(&data[..n]).as_bytes();
        data[n..].copy_from_slice(&sum);
    }
    if let Ok((dirs, contents)) = hash_memo::decode(1, &data) {
        assert_eq!(hash_memo::encode(1, &dirs, &contents), data, "a hash memo changes through encoding");
    }
}

/// The remotes file (`STORE/remotes`): what decodes re-encodes to the same remotes, as a
/// file and as a payload.
/// An object read from a remote (`scion-remote`'s layout): its trailing crc32c fixed up
/// where the first byte is odd ("SCION..." is).
fn remote_object(data: &[u8]) -> Vec<u8> {
    let mut b = data.to_vec();
    if fix_up(data) && b.len() >= 4 {
        let n = b.len() - 4;
        let crc = crc32c::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
    }
    b
}

/// A pack's index (`packs/HASH.idx`).
pub fn remote_pack_index(data: &[u8]) {
    use scion_remote::layout::PackIndex;
    if let Ok(i) = PackIndex::decode(&remote_object(data)) {
        assert_eq!(PackIndex::decode(&i.encode()).ok(), Some(i), "a pack index changes through encoding");
    }
}

/// A published tree (`trees/HASH`).
pub fn remote_tree_object(data: &[u8]) {
    use scion_remote::layout::TreeObject;
    if let Ok(t) = TreeObject::decode(&remote_object(data)) {
        for b in &t.blocks {
            assert_eq!(t.block(&b.hash), Some(b));
        }
        assert_eq!(TreeObject::decode(&t.encode().expect("a decoded tree encodes")).ok(), Some(t), "a tree object changes through encoding");
    }
}

/// A manifest (`manifests/NAME/VERSION`).
pub fn remote_manifest(data: &[u8]) {
    use scion_remote::layout::Manifest;
    if let Ok(m) = Manifest::decode(&remote_object(data)) {
        assert_eq!(Manifest::decode(&m.encode()).ok(), Some(m), "a manifest changes through encoding");
    }
}

/// The attachments file (`STORE/attachments`), whole or its payload.
pub fn attachments_file(data: &[u8]) {
    use scion_fs::records::attachments;
    let _ = attachments::decode_file(data);
    if let Ok(list) = attachments::decode_payload(data) {
        assert_eq!(attachments::decode_payload(&attachments::encode_payload(&list)).ok(), Some(list));
    }
}

pub fn remotes_file(data: &[u8]) {
    use scion_fs::records::remotes;
    if let Ok(stored) = remotes::decode_file(data) {
        let again = remotes::decode_payload(&remotes::encode_payload(&stored.remotes)).expect("re-encoded remotes decode");
        assert_eq!(again, stored.remotes, "the remotes change through encoding");
    }
    if let Ok(list) = remotes::decode_payload(data) {
        assert_eq!(remotes::decode_payload(&remotes::encode_payload(&list)).ok(), Some(list));
    }
}
