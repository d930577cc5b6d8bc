use scion_store::{os_host, BlockKind, BlockStore, Error, StoreLock, Superblock, SUPERBLOCK_FILE, SUPERBLOCK_SLOT};
use std::os::unix::fs::FileExt;

fn store(dir: &std::path::Path) -> BlockStore {
    std::fs::create_dir_all(dir.join("packs")).unwrap();
    BlockStore::open(&os_host(), dir, 1, 0, true).unwrap()
}

#[test]
fn blocks_round_trip_and_corruption_is_detected() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let a = s.write(BlockKind::Data, b"hello world").unwrap();
    let b = s.write(BlockKind::Node, &vec![7u8; 70000]).unwrap();
    s.sync().unwrap();
    assert_eq!(s.read(&a).unwrap(), b"hello world");
    assert_eq!(s.write(BlockKind::Data, &[1u8; 65536]).unwrap().footprint(), 65536);
    assert_eq!(s.read(&b).unwrap(), vec![7u8; 70000]);
    // Flip one payload byte of `b`.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.path().join("packs/00000001.pack"))
        .unwrap();
    f.write_all_at(&[8], b.offset() + 100).unwrap();
    match s.read(&b) {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("checksum"), "{detail}"),
        r => panic!("expected corruption, got {r:?}"),
    }
    // File data carries no header: its pointer's hash catches the damage.
    f.write_all_at(b"J", a.offset() + 3).unwrap();
    match s.read(&a) {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("hash"), "{detail}"),
        r => panic!("expected corruption, got {r:?}"),
    }
    // A pointer of the wrong kind, or to the wrong place, is refused.
    let mut wrong = b;
    wrong.kind = BlockKind::Meta;
    assert!(matches!(s.read(&wrong), Err(Error::Corrupt { .. })));
    let c = s.write(BlockKind::Data, b"another").unwrap();
    let mut misdirected = c;
    misdirected.hash[0] ^= 1;
    assert!(matches!(s.read(&misdirected), Err(Error::Corrupt { .. })));
}

#[test]
fn uncommitted_pack_tail_is_cut_and_short_packs_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let a = s.write(BlockKind::Data, b"kept").unwrap();
    let (pack, end) = s.position();
    s.write(BlockKind::Data, b"never committed").unwrap();
    drop(s);
    let s = BlockStore::open(&os_host(), d.path(), pack, end, true).unwrap();
    s.resume_at(pack, end).unwrap();
    assert_eq!(s.position(), (pack, end));
    assert_eq!(
        std::fs::metadata(d.path().join("packs/00000001.pack")).unwrap().len(),
        end
    );
    assert_eq!(s.read(&a).unwrap(), b"kept");
    drop(s);
    assert!(matches!(
        BlockStore::open(&os_host(), d.path(), pack, end + 4096, true),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn punched_blocks_free_host_space() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let ptrs: Vec<_> = (0..64)
        .map(|i| s.write(BlockKind::Data, &vec![i as u8; 65536]).unwrap())
        .collect();
    s.sync().unwrap();
    let before = std::fs::metadata(d.path().join("packs/00000001.pack"))
        .unwrap()
        .blocks();
    for p in &ptrs[..48] {
        s.punch(p).unwrap();
    }
    let after = std::fs::metadata(d.path().join("packs/00000001.pack"))
        .unwrap()
        .blocks();
    assert!(after * 3 < before, "{before} -> {after} sectors");
    assert_eq!(s.read(&ptrs[60]).unwrap(), vec![60u8; 65536]);
}

/// `punch_all` merges blocks lying back to back (in any order, repeated or not) into runs and
/// punches exactly those: the live blocks between and after them read back.
#[test]
fn punch_all_frees_runs_and_nothing_else() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let ptrs: Vec<_> = (0..64)
        .map(|i| s.write(BlockKind::Data, &vec![i as u8 + 1; 65536 - i * 1000]).unwrap())
        .collect();
    s.sync().unwrap();
    let pack = d.path().join("packs/00000001.pack");
    let before = std::fs::metadata(&pack).unwrap().blocks();
    // Two runs (0..20 and 30..50), given backwards and with repeats; 20..30 and 50.. live.
    let mut dead: Vec<_> = ptrs[..20].iter().chain(&ptrs[30..50]).copied().collect();
    dead.reverse();
    dead.extend_from_slice(&ptrs[5..8]);
    s.punch_all(&dead).unwrap();
    let after = std::fs::metadata(&pack).unwrap().blocks();
    assert!(after * 2 < before, "{before} -> {after} sectors");
    for (i, p) in ptrs.iter().enumerate() {
        if (20..30).contains(&i) || i >= 50 {
            assert_eq!(s.read(p).unwrap(), vec![i as u8 + 1; 65536 - i * 1000], "block {i}");
        }
    }
}

#[test]
fn superblock_newest_valid_slot_wins() {
    let d = tempfile::tempdir().unwrap();
    let mut sb = Superblock {
        version: scion_store::FORMAT_VERSION,
        generation: 4,
        store_id: [9; 16],
        pack: 1,
        pack_end: 0,
        checkpoint: None,
    };
    sb.create(&os_host(), d.path()).unwrap();
    sb.generation = 5;
    sb.pack_end = 8192;
    sb.write(&os_host(), d.path()).unwrap();
    assert_eq!(Superblock::read(&os_host(), d.path()).unwrap().generation, 5);
    // Tear the newest slot: the previous one is used.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.path().join(SUPERBLOCK_FILE))
        .unwrap();
    f.write_all_at(&[0xff; 100], (5 % 2) * SUPERBLOCK_SLOT as u64 + 200)
        .unwrap();
    assert_eq!(Superblock::read(&os_host(), d.path()).unwrap().generation, 4);
    // Both torn: a clear error.
    f.write_all_at(&[0xff; 100], (4 % 2) * SUPERBLOCK_SLOT as u64 + 200)
        .unwrap();
    let e = Superblock::read(&os_host(), d.path()).unwrap_err().to_string();
    assert!(e.contains("superblock"), "{e}");
}

#[test]
fn unknown_format_version_and_missing_store_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let e = Superblock::read(&os_host(), d.path()).unwrap_err().to_string();
    assert!(e.contains("not a scion store"), "{e}");
    let sb = Superblock {
        version: scion_store::FORMAT_VERSION,
        generation: 1,
        store_id: [1; 16],
        pack: 1,
        pack_end: 0,
        checkpoint: None,
    };
    sb.create(&os_host(), d.path()).unwrap();
    // Rewrite the version field and fix the slot checksum, as another scion would write it.
    let path = d.path().join(SUPERBLOCK_FILE);
    let pristine = std::fs::read(&path).unwrap();
    let with_version = |v: u32| {
        let mut data = pristine.clone();
        let slot = &mut data[SUPERBLOCK_SLOT..2 * SUPERBLOCK_SLOT];
        slot[8..12].copy_from_slice(&v.to_le_bytes());
        let crc = crc32c::crc32c(&slot[..SUPERBLOCK_SLOT - 4]);
        slot[SUPERBLOCK_SLOT - 4..].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &data).unwrap();
    };
    with_version(99);
    let e = Superblock::read(&os_host(), d.path()).unwrap_err().to_string();
    assert!(e.contains("version 99"), "{e}");
    with_version(1);
    let e = Superblock::read(&os_host(), d.path()).unwrap_err().to_string();
    assert!(e.contains("version 1 "), "{e}");
    // Version 2 (before chunk patches) is read as is.
    with_version(2);
    assert_eq!(Superblock::read(&os_host(), d.path()).unwrap().generation, 1);
}

#[test]
fn second_owner_is_refused_with_the_holders_name() {
    let d = tempfile::tempdir().unwrap();
    let _held = StoreLock::acquire(d.path(), "mounted at /somewhere").unwrap();
    assert!(StoreLock::is_held(d.path()));
    let e = StoreLock::acquire(d.path(), "second").err().unwrap().to_string();
    assert!(
        e.contains(&format!("pid={}", std::process::id())) && e.contains("/somewhere"),
        "{e}"
    );
}

#[test]
fn decoders_refuse_garbage_without_panicking() {
    use scion_store::codec::Reader;
    use scion_store::BlockPtr;
    for len in 0..64 {
        let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        let _ = BlockPtr::decode(&mut Reader::new(&junk, "junk"));
        let mut r = Reader::new(&junk, "junk");
        let _ = r.count(1);
        let _ = r.bytes();
    }
}

/// Runs of whole data blocks go to the pack with one write, bypassing the page cache where the
/// host allows it (from an unaligned buffer through an aligned copy), between blocks written the
/// usual way; all read back the same, before and after the store is reopened, and with the
/// host's direct writes unavailable (a host without `open_direct`).
#[test]
fn data_runs_are_written_whole_and_read_back() {
    struct NoDirect(scion_store::Host);
    impl scion_store::HostFs for NoDirect {
        fn open(
            &self,
            p: &std::path::Path,
            m: scion_store::OpenMode,
        ) -> std::io::Result<std::sync::Arc<dyn scion_store::host::HostFile>> {
            self.0.open(p, m)
        }
        fn remove_file(&self, p: &std::path::Path) -> std::io::Result<()> {
            self.0.remove_file(p)
        }
        fn list_dir(&self, p: &std::path::Path) -> std::io::Result<Vec<String>> {
            self.0.list_dir(p)
        }
        fn create_dir_all(&self, p: &std::path::Path) -> std::io::Result<()> {
            self.0.create_dir_all(p)
        }
        fn exists(&self, p: &std::path::Path) -> bool {
            self.0.exists(p)
        }
        fn sync_dir(&self, p: &std::path::Path) -> std::io::Result<()> {
            self.0.sync_dir(p)
        }
        fn allocated_bytes(&self, p: &std::path::Path) -> std::io::Result<u64> {
            self.0.allocated_bytes(p)
        }
        fn space(&self, p: &std::path::Path) -> std::io::Result<scion_store::host::HostSpace> {
            self.0.space(p)
        }
        fn lock(&self, d: &std::path::Path, h: &str) -> scion_store::Result<Box<dyn std::any::Any + Send>> {
            self.0.lock(d, h)
        }
    }
    const B: usize = 65536;
    for host in [os_host(), std::sync::Arc::new(NoDirect(os_host())) as scion_store::Host] {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("packs")).unwrap();
        let s = BlockStore::open(&host, d.path(), 1, 0, true).unwrap();
        // Runs of 9 blocks are long enough to go direct where the host can; one block is not.
        let mut buf = vec![0u8; 1 + 9 * B];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i * 7 % 251) as u8;
        }
        let mut aligned_buf = Aligned::new(9 * B);
        aligned_buf.bytes().copy_from_slice(&buf[1..]);
        let small = s.write(BlockKind::Data, b"before").unwrap();
        let unaligned = s.write_data_run(&buf[1..], B).unwrap();
        let node = s.write(BlockKind::Node, &[9u8; 5000]).unwrap();
        let one = s.write_data_run(&buf[1..1 + B], B).unwrap();
        let aligned = s.write_data_run(aligned_buf.bytes(), B).unwrap();
        assert_eq!(unaligned.len(), 9);
        for run in [&unaligned, &aligned] {
            for (i, p) in run.iter().enumerate() {
                assert_eq!(p.footprint(), B as u64);
                assert_eq!(p.offset(), run[0].offset() + (i * B) as u64, "back to back");
            }
        }
        s.sync().unwrap();
        let (pack, end) = s.position();
        let check = |s: &BlockStore| {
            assert_eq!(s.read(&small).unwrap(), b"before");
            assert_eq!(s.read(&node).unwrap(), vec![9u8; 5000]);
            for run in [&unaligned, &aligned] {
                for (i, p) in run.iter().enumerate() {
                    assert_eq!(s.read(p).unwrap(), &buf[1 + i * B..1 + (i + 1) * B]);
                }
            }
            assert_eq!(s.read(&one[0]).unwrap(), &buf[1..1 + B]);
        };
        check(&s);
        drop(s);
        let s = BlockStore::open(&host, d.path(), pack, end, true).unwrap();
        check(&s);
    }
}

/// Direct writes allocate the pack ahead of them (so concurrent ones land in allocated space
/// instead of extending the file); `sync` cuts what was not used, so a durable store's size
/// on the host is what it holds; and a store dropped without a sync (a crash) has its tail
/// cut at reopen. Blocks written between, buffered or direct, read back.
#[test]
fn allocation_ahead_is_cut_at_sync_and_at_reopen() {
    const B: usize = 65536;
    let host = os_host();
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("packs")).unwrap();
    let pack_len = || std::fs::metadata(d.path().join("packs/00000001.pack")).unwrap().len();
    let s = BlockStore::open(&host, d.path(), 1, 0, true).unwrap();
    // Runs of 8 blocks (512 KiB) are long enough to go direct.
    let data: Vec<u8> = (0..8 * B).map(|i| (i * 13 % 251) as u8).collect();
    let a = s.write_data_run(&data, B).unwrap();
    let (_, end) = s.position();
    assert_eq!(end, 8 * B as u64);
    let ahead = pack_len() > end;
    if !ahead {
        eprintln!("this host did not allocate ahead (no direct I/O or no fallocate here)");
    }
    let small = s.write(BlockKind::Node, b"between").unwrap();
    let b = s.write_data_run(&data[..2 * B], B).unwrap();
    assert_eq!(
        small.offset(),
        end,
        "a block appended after allocation ahead goes at the end"
    );
    s.sync().unwrap();
    let (pack, end) = s.position();
    assert_eq!(pack_len(), end, "sync leaves no allocation past the end");
    // More direct writes, then a crash (no sync): reopening cuts the tail.
    let c = s.write_data_run(&data, B).unwrap();
    if ahead {
        assert!(pack_len() > s.position().1, "allocated ahead again after the sync");
    }
    drop(s);
    let s = BlockStore::open(&host, d.path(), pack, end, true).unwrap();
    s.resume_at(pack, end).unwrap();
    assert_eq!(
        pack_len(),
        end,
        "reopening cuts what was written or allocated after the end"
    );
    for (i, p) in a.iter().enumerate() {
        assert_eq!(s.read(p).unwrap(), &data[i * B..(i + 1) * B]);
    }
    assert_eq!(s.read(&small).unwrap(), b"between");
    assert_eq!(s.read(&b[1]).unwrap(), &data[B..2 * B]);
    assert!(c[0].offset() >= end, "the unsynced run lay past the end");
    let again = s.write_data_run(&data[..B], B).unwrap();
    assert_eq!(again[0].offset(), end);
    assert_eq!(
        pack_len(),
        end + B as u64,
        "a short run goes through the page cache, nothing allocated ahead"
    );
    s.sync().unwrap();
    assert_eq!(pack_len(), end + B as u64);
}

/// A page-aligned buffer, like the io_uring entries' payload buffers.
struct Aligned(std::alloc::Layout, *mut u8);
impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        Aligned(layout, unsafe { std::alloc::alloc_zeroed(layout) })
    }
    fn bytes(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.1, self.0.size()) }
    }
}
impl Drop for Aligned {
    fn drop(&mut self) {
        unsafe { std::alloc::dealloc(self.1, self.0) }
    }
}

/// Runs of whole blocks read in place, large and small, into aligned buffers (as the FUSE
/// adapter's reply buffers are) and unaligned ones: all read back what was written, and a
/// flipped byte on disk is reported as a damaged block, also after a clean read of it.
#[test]
fn runs_read_in_place_are_verified_on_every_path() {
    const B: usize = 65536;
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let data: Vec<u8> = (0..8 * B).map(|i| (i * 31 % 253) as u8).collect();
    let ptrs = s.write_data_run(&data, B).unwrap();
    s.sync().unwrap();
    let mut big = Aligned::new(8 * B);
    assert!(s.read_whole_into(&ptrs, &[], big.bytes(), true).unwrap());
    assert!(big.bytes() == &data[..], "large aligned run");
    let mut unaligned = vec![0u8; 8 * B + 1];
    assert!(s.read_whole_into(&ptrs, &[], &mut unaligned[1..], true).unwrap());
    assert!(unaligned[1..] == data[..], "large unaligned run");
    let mut small = Aligned::new(2 * B);
    assert!(s.read_whole_into(&ptrs[3..5], &[], small.bytes(), true).unwrap());
    assert!(small.bytes() == &data[3 * B..5 * B], "small run");
    // A long aligned run reads past the host's page cache: blocks written and not yet synced
    // (their bytes possibly still dirty there) must read back all the same.
    let fresh: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
    let unsynced = s.write_data_run(&fresh, B).unwrap();
    let mut long = Aligned::new(8 * B);
    assert!(s.read_whole_into(&unsynced, &[], long.bytes(), true).unwrap());
    assert!(long.bytes() == &fresh[..], "long aligned run of unsynced blocks");
    // Flip a byte of the sixth block on disk, behind the store's back.
    let pack = d.path().join("packs/00000001.pack");
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&pack).unwrap();
    let at = ptrs[5].offset() + 100;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 1], at).unwrap();
    f.sync_all().unwrap();
    for (what, stream) in [("aligned", true), ("aligned, through the host's cache", false), ("unaligned", true)] {
        let buf = if what == "unaligned" { &mut unaligned[1..] } else { big.bytes() };
        match s.read_whole_into(&ptrs, &[], buf, stream) {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("{what} run over a damaged block: {other:?}"),
        }
    }
}

/// Whole blocks verified by their page sums instead of their hashes (as a file's reads do
/// when its content tree keeps the sums) read back what was written, and fail as the hash
/// would on a flipped bit in any page, on another block's sums (a stale or misdirected
/// block), and on a punched (zeroed) block; sums of the wrong count fall back to the hash.
#[test]
fn runs_verified_by_page_sums_fail_where_the_hash_would() {
    const B: usize = 65536;
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let data: Vec<u8> = (0..4 * B).map(|i| (i * 131 % 251) as u8).collect();
    let ptrs = s.write_data_run(&data, B).unwrap();
    s.sync().unwrap();
    let sums: Vec<Vec<u32>> = data.chunks(B).map(scion_store::page_sums).collect();
    let with = |v: &[Vec<u32>]| -> Vec<Option<Vec<u32>>> { v.iter().cloned().map(Some).collect() };
    let read = |sums: &[Option<Vec<u32>>]| {
        let refs: Vec<Option<&[u32]>> = sums.iter().map(|s| s.as_deref()).collect();
        let mut out = vec![0u8; 4 * B];
        s.read_whole_into(&ptrs, &refs, &mut out, false).map(|done| (done, out))
    };
    let (done, out) = read(&with(&sums)).unwrap();
    assert!(done && out == data, "a run verified by its page sums");
    // Another block's sums: the bytes read are not the ones the pointer was written with.
    let mut swapped = with(&sums);
    swapped.swap(1, 2);
    assert!(matches!(read(&swapped), Err(Error::Corrupt { .. })), "sums of another block accepted");
    // Sums for too few pages are not trusted, the hash verifies: the bytes are good.
    let mut short = with(&sums);
    short[3] = Some(sums[3][..15].to_vec());
    assert!(read(&short).unwrap().1 == data, "a run verified by the hash where sums are malformed");
    // A flipped bit in the last page of the third block, then that block punched to zeros.
    let pack = d.path().join("packs/00000001.pack");
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&pack).unwrap();
    let at = ptrs[2].offset() + B as u64 - 1;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], at).unwrap();
    f.sync_all().unwrap();
    match read(&with(&sums)) {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("page 15"), "{detail}"),
        other => panic!("a run over a damaged page: {other:?}"),
    }
    f.write_all_at(&vec![0u8; B], ptrs[2].offset()).unwrap();
    f.sync_all().unwrap();
    assert!(matches!(read(&with(&sums)), Err(Error::Corrupt { .. })), "a zeroed block accepted");
}

#[test]
fn batches_are_laid_out_as_single_writes_would_be() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let payloads: Vec<Vec<u8>> = [0usize, 1, 4095, 4096, 4097, 65536, 70000]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (j * 7 + i) as u8).collect())
        .collect();
    let refs: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
    let before = s.write(BlockKind::Node, b"before").unwrap();
    for kind in [BlockKind::Data, BlockKind::Node] {
        let ptrs = s.write_batch(kind, &refs).unwrap();
        assert_eq!(ptrs.len(), payloads.len());
        // Back to back, each on its own pages, as `write` would have put them.
        let mut at = ptrs[0].offset();
        for (p, data) in ptrs.iter().zip(&payloads) {
            assert_eq!(p.offset(), at);
            assert_eq!(p.offset() % 4096, 0);
            at += p.footprint();
            assert_eq!(p.kind, kind);
            assert_eq!(&s.read(p).unwrap(), data);
        }
        assert_eq!(s.position().1, at, "the batch ends where the store's next block goes");
    }
    let after = s.write(BlockKind::Node, b"after").unwrap();
    s.sync().unwrap();
    assert_eq!(s.read(&before).unwrap(), b"before");
    assert_eq!(s.read(&after).unwrap(), b"after");
    // Damage inside one block of a batch is found in that block only.
    let ptrs = s.write_batch(BlockKind::Data, &refs).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.path().join("packs/00000001.pack"))
        .unwrap();
    f.write_all_at(&[0xff], ptrs[5].offset() + 10).unwrap();
    for (i, p) in ptrs.iter().enumerate() {
        assert_eq!(s.read(p).is_err(), i == 5, "block {i}");
    }
}

#[test]
fn random_reads_without_readahead_are_verified() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let whole: Vec<u8> = (0..65536).map(|i| (i * 31 % 253) as u8).collect();
    let short: Vec<u8> = (0..5000).map(|i| (i * 17 % 251) as u8).collect();
    let a = s.write(BlockKind::Data, &whole).unwrap();
    let b = s.write(BlockKind::Data, &short).unwrap();
    let c = s.write(BlockKind::Data, &whole).unwrap();
    let n = s
        .write(BlockKind::Node, b"a node: read through the page cache")
        .unwrap();
    s.sync().unwrap();
    // Read back (without readahead where this host allows it) without syncing first, too.
    let e = s.write(BlockKind::Data, &short).unwrap();
    assert_eq!(&s.read_shared(&a, true).unwrap()[..], &whole[..]);
    assert_eq!(&s.read_shared(&b, true).unwrap()[..], &short[..]);
    assert_eq!(&s.read_shared(&e, true).unwrap()[..], &short[..]);
    assert_eq!(
        &s.read_shared(&n, true).unwrap()[..],
        b"a node: read through the page cache"
    );
    // Damage in a block not read yet (the kept blocks are verified already) is found.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.path().join("packs/00000001.pack"))
        .unwrap();
    f.write_all_at(&[0x5a], c.offset() + 40_000).unwrap();
    match s.read_shared(&c, true) {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("hash"), "{detail}"),
        r => panic!("expected corruption, got {:?}", r.map(|d| d.len())),
    }
    assert!(s.read_shared(&c, false).is_err());
}

/// `cached` says whether reading blocks would wait for the disk: yes once the host dropped
/// their pages, no while it holds them (what the NFS server decides to read inline by).
#[test]
fn cached_says_whether_the_host_holds_the_blocks() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let ptrs: Vec<_> = (0..4u8).map(|i| s.write(BlockKind::Data, &[i; 65536]).unwrap()).collect();
    s.sync().unwrap();
    let pack = std::fs::File::open(d.path().join("packs/00000001.pack")).unwrap();
    use std::os::fd::AsRawFd;
    // Written and synced pages are clean: the host drops them when asked (tmpfs cannot: its
    // pages are the file).
    unsafe { libc::posix_fadvise(pack.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    let path = std::ffi::CString::new(d.path().as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut fs) }, 0);
    if fs.f_type != libc::TMPFS_MAGIC {
        assert!(!s.cached(&ptrs), "pages dropped, yet said cached");
    }
    for p in &ptrs {
        s.read(p).unwrap();
    }
    // A kernel without cachestat (before 6.5) can never say yes: then every read goes off the
    // server's thread, as before.
    let supported = unsafe { libc::syscall(451, -1, 0usize, 0usize, 0u32) } == -1
        && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS);
    assert_eq!(s.cached(&ptrs), supported, "blocks just read back");
    assert!(s.cached(&[]));
}

/// A deferred block is placed at once (reads find it, nothing else is written over its
/// place) and reaches its pack only at the next sync, neighbours as one run, byte for byte
/// as `write` would have laid them out.
#[test]
fn deferred_blocks_are_read_before_and_written_at_the_sync() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let pack = d.path().join("packs/00000001.pack");
    let a = s.write_deferred(BlockKind::Node, &vec![1u8; 16000]).unwrap();
    let data = s.write(BlockKind::Data, &[9u8; 4096]).unwrap();
    let b = s.write_deferred(BlockKind::Node, &vec![2u8; 5000]).unwrap();
    let c = s.write_deferred(BlockKind::Node, &vec![3u8; 100]).unwrap();
    assert!(a.offset() < data.offset() && data.offset() < b.offset() && b.offset() < c.offset());
    assert_eq!(s.deferred_count(), 3);
    assert_eq!(s.deferred_below(s.position()), 3);
    // Read before any byte of theirs is in the pack (it holds only the data block).
    let on_disk = std::fs::read(&pack).unwrap();
    assert!(on_disk.len() as u64 <= b.offset() && on_disk[a.offset() as usize..][..16].iter().all(|x| *x == 0));
    assert_eq!(s.read(&a).unwrap(), vec![1u8; 16000]);
    assert_eq!(s.read(&c).unwrap(), vec![3u8; 100]);
    let mut wrong = b;
    wrong.hash[0] ^= 1;
    assert!(matches!(s.read(&wrong), Err(Error::Corrupt { .. })), "a deferred block is verified too");
    s.sync().unwrap();
    assert_eq!(s.deferred_count(), 0);
    assert_eq!(s.deferred_below(s.position()), 0);
    // Now in the pack, as a fresh store (no deferred blocks) reads them.
    let (id, end) = s.position();
    drop(s);
    let again = BlockStore::open(&os_host(), d.path(), id, end, true).unwrap();
    assert_eq!(again.read(&a).unwrap(), vec![1u8; 16000]);
    assert_eq!(again.read(&b).unwrap(), vec![2u8; 5000]);
    assert_eq!(again.read(&c).unwrap(), vec![3u8; 100]);
    assert_eq!(again.read(&data).unwrap(), vec![9u8; 4096]);
    // Laid out as `write` lays a block out.
    let plain = again.write(BlockKind::Node, &vec![3u8; 100]).unwrap();
    again.sync().unwrap();
    let bytes = std::fs::read(&pack).unwrap();
    let frame = |p: &scion_store::BlockPtr| bytes[p.offset() as usize..(p.offset() + p.footprint()) as usize].to_vec();
    assert_eq!(frame(&c), frame(&plain));
}

/// A deferred block's buffer is used again once it is written out: a smaller block in a
/// larger buffer is laid out as `write` lays it (no byte of the one before), and the spare
/// buffers go when a round passes without a block deferred (`release_idle_buffers`).
#[test]
fn deferred_buffers_are_reused_and_let_go_when_idle() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let pack = d.path().join("packs/00000001.pack");
    let big: Vec<_> = (0..4).map(|i| s.write_deferred(BlockKind::Node, &vec![10 + i; 16000]).unwrap()).collect();
    assert_eq!(s.deferred_spare_bytes(), 0);
    s.sync().unwrap();
    let spare = s.deferred_spare_bytes();
    assert!(spare >= 4 * 16000, "{spare} bytes of spare buffers after 4 blocks of 16,000");
    // Drawn from the spares: smaller payloads than the buffers held.
    let small: Vec<_> = (0..4u8).map(|i| s.write_deferred_with(BlockKind::Node, 10, |b| b.extend_from_slice(&[20 + i; 300])).unwrap()).collect();
    assert!(s.deferred_spare_bytes() < spare);
    for (i, p) in small.iter().enumerate() {
        assert_eq!(s.read(p).unwrap(), vec![20 + i as u8; 300]);
    }
    s.sync().unwrap();
    // Drawn from since the last round: kept; a round with none drawn: let go.
    s.release_idle_buffers();
    assert!(s.deferred_spare_bytes() > 0);
    s.release_idle_buffers();
    assert_eq!(s.deferred_spare_bytes(), 0);
    let (id, end) = s.position();
    drop(s);
    let again = BlockStore::open(&os_host(), d.path(), id, end, true).unwrap();
    for (i, p) in big.iter().enumerate() {
        assert_eq!(again.read(p).unwrap(), vec![10 + i as u8; 16000]);
    }
    let plain: Vec<_> = (0..4u8).map(|i| again.write(BlockKind::Node, &[20 + i; 300]).unwrap()).collect();
    again.sync().unwrap();
    let bytes = std::fs::read(&pack).unwrap();
    let frame = |p: &scion_store::BlockPtr| bytes[p.offset() as usize..(p.offset() + p.footprint()) as usize].to_vec();
    for (p, q) in small.iter().zip(&plain) {
        assert_eq!(again.read(p).unwrap(), again.read(q).unwrap());
        assert_eq!(frame(p), frame(q), "a reused buffer laid out as a fresh one");
    }
}

/// Past `DEFERRED_MAX` bytes waiting, blocks are written at once: a large fold costs no
/// more memory than before.
#[test]
fn deferred_blocks_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let block = vec![5u8; 1 << 20];
    let ptrs: Vec<_> = (0..40).map(|_| s.write_deferred(BlockKind::Node, &block).unwrap()).collect();
    let waiting = s.deferred_count();
    assert!((16..40).contains(&waiting), "{waiting} of 40 blocks of 1 MiB wait");
    for p in &ptrs {
        assert_eq!(s.read(p).unwrap(), block);
    }
    s.sync().unwrap();
    assert_eq!(s.deferred_count(), 0);
}
