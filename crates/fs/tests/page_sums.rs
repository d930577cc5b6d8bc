//! Page sums (format 6): a short read of a committed block reads and verifies the pages it
//! needs, and only those. A flipped bit in one page fails reads of that page (EIO, never
//! wrong bytes) while the block's other pages still read; small writes into committed
//! chunks compare against the pages they cover; check verifies every stored sum.

mod common;
use common::*;
use scion_fs::Kind;

fn read(fs: &mut scion_fs::Fs, ino: u64, off: u64, len: u32) -> scion_fs::FsResult<Vec<u8>> {
    fs.read_plan(ino, off, len)?.execute()
}

#[test]
fn short_reads_verify_their_pages_alone() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    // Four whole chunks, through write-ahead (the path large writes take), and a partial
    // fifth through the checkpoint.
    let data: Vec<u8> = (0..(4 * 65536 + 5000)).map(|i| (i * 7 % 251) as u8).collect();
    let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let ahead = scion_fs::write_ahead(fs.block_store(), f, 0, &data).unwrap();
    fs.write_with(f, 0, &data, ahead, scion_fs::Stamp::Now).unwrap();
    fs.close().unwrap();
    let rep = committed(&store);
    assert_eq!(rep.page_summed_chunks, 5, "{rep}");

    let mut fs = open(&store);
    let f = lookup(&mut fs, scion_fs::ROOT_INO, "f").unwrap();
    for (off, len) in [
        (0, 4096),
        (70_000, 100),
        (65536 * 2 + 4090, 10),
        (4 * 65536 + 4000, 1000),
    ] {
        assert_eq!(
            read(&mut fs, f, off, len).unwrap(),
            data[off as usize..off as usize + len as usize]
        );
    }
    drop(fs);

    // Flip a bit in page 3 of chunk 1 (blocks of a fresh file lie in order in the pack, the
    // first at its start: data blocks have no header).
    let pack = store.join("packs/00000001.pack");
    let bytes = std::fs::read(&pack).unwrap();
    let first = bytes
        .windows(64)
        .position(|w| w == &data[..64])
        .expect("the file's first block in the pack");
    let at = first + 65536 + 3 * 4096 + 17;
    let flip = |b: u8| {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&pack).unwrap();
        f.write_all_at(&[b ^ 0x04], at as u64).unwrap();
    };
    flip(bytes[at]);

    let mut fs = open(&store);
    let f = lookup(&mut fs, scion_fs::ROOT_INO, "f").unwrap();
    // That page fails, alone or as part of a short read...
    assert_eq!(
        read(&mut fs, f, 65536 + 3 * 4096, 4096).err(),
        Some(scion_fs::errno::EIO)
    );
    assert_eq!(
        read(&mut fs, f, 65536 + 3 * 4096 + 4000, 200).err(),
        Some(scion_fs::errno::EIO)
    );
    // ... the block's other pages read, verified by their own sums...
    assert_eq!(read(&mut fs, f, 65536, 8192).unwrap(), data[65536..65536 + 8192]);
    assert_eq!(
        read(&mut fs, f, 65536 + 8 * 4096, 4096).unwrap(),
        data[65536 + 32768..65536 + 36864]
    );
    // ... and a long read of the block checks its hash: EIO too.
    assert_eq!(read(&mut fs, f, 0, 256 << 10).err(), Some(scion_fs::errno::EIO));
    drop(fs);
    let rep = scion_fs::check::check_committed(&scion_store::os_host(), &store).unwrap();
    assert!(!rep.is_clean(), "check finds the flipped bit");
    flip(bytes[at] ^ 0x04);

    // A small write into a committed chunk (compared with the pages it covers) reads back.
    let mut fs = open(&store);
    let f = lookup(&mut fs, scion_fs::ROOT_INO, "f").unwrap();
    let mut want = data.clone();
    let page: Vec<u8> = want[2 * 65536 + 8192..2 * 65536 + 12288]
        .iter()
        .map(|b| b ^ 1)
        .collect();
    fs.write(f, 2 * 65536 + 8192, &page).unwrap();
    want[2 * 65536 + 8192..2 * 65536 + 12288].copy_from_slice(&page);
    assert_eq!(read(&mut fs, f, 2 * 65536, 65536).unwrap(), want[2 * 65536..3 * 65536]);
    fs.close().unwrap();
    let rep = committed(&store);
    assert!(rep.patched_chunks >= 1, "{rep}");
    let mut fs = open(&store);
    let f = lookup(&mut fs, scion_fs::ROOT_INO, "f").unwrap();
    assert_eq!(read(&mut fs, f, 0, want.len() as u32).unwrap(), want);
    assert_eq!(
        read(&mut fs, f, 2 * 65536 + 8000, 400).unwrap(),
        want[2 * 65536 + 8000..2 * 65536 + 8400]
    );
}
