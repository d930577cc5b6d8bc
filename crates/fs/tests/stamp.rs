//! Who stamps a write's times (`Stamp`): with the kernel's writeback cache the kernel keeps a
//! file's mtime and ctime and sends them in a SETATTR, so its writes leave them alone, live
//! and when the journal is replayed after a crash; the engine's own writes stamp them now.

mod common;
use common::*;
use scion_fs::{Kind, SetAttr, Stamp, Ts};

#[test]
fn kernel_stamped_writes_leave_the_times_also_on_replay() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let (m, c) = (Ts { sec: 1_000_000, nsec: 5 }, Ts { sec: 2_000_000, nsec: 7 });
    fs.setattr(f, SetAttr { mtime: Some(m), ctime: Some(c), ..Default::default() }).unwrap();
    let data: Vec<u8> = (0..(2 * 65536 + 300)).map(|i| (i % 253) as u8).collect();
    for (off, bytes) in [(0, &data[..]), (10, &b"small"[..]), (1 << 20, &b"tail"[..])] {
        let ahead = scion_fs::write_ahead(fs.block_store(), f, off, bytes).unwrap();
        fs.write_with(f, off, bytes, ahead, Stamp::Kernel).unwrap();
    }
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.mtime, a.ctime, a.size), (m, c, (1 << 20) + 4));
    fs.fsync().unwrap();
    drop(fs); // a crash: the journal is replayed at the next open
    let mut fs = open(&store);
    let f = lookup(&mut fs, scion_fs::ROOT_INO, "f").unwrap();
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.mtime, a.ctime, a.size), (m, c, (1 << 20) + 4));
    assert_eq!(&read_all(&mut fs, f)[..data.len()], &data[..10]
        .iter()
        .chain(b"small")
        .chain(&data[15..])
        .copied()
        .collect::<Vec<u8>>()[..]);
    // The engine's own write stamps both, at least as late as the ctime it had.
    fs.write(f, 0, b"x").unwrap();
    let b = fs.getattr(f).unwrap();
    assert!(b.mtime > m && b.ctime >= c && b.mtime == b.ctime, "{b:?}");
}
