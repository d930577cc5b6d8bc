//! Long writes off the chunk grid (issue 37, `pieces.rs`): after one write-back of an odd
//! size, every 1 MiB WRITE of a stream begins and ends inside a chunk. The write that brings
//! the rest of a chunk puts it in a pack whole, so its piece is not journaled, and the
//! other piece's record is taken back when it is still the journal's last. What a file
//! reads must be the same before and after a crash, and the store must check clean.

use scion_fs::{Fs, Kind};

mod common;
use common::{committed, lookup, new_store, open, read_all};

const MIB: u64 = 1 << 20;
/// The odd write-back's length: 239 pages, as the kernel sent it in a bad run.
const SHIFT: u64 = 978_944;

fn bytes(len: u64, seed: u64) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + seed * 13) % 251) as u8 + 1).collect()
}

fn journal(fs: &Fs) -> u64 {
    fs.status_facts().written.journal
}

/// The WRITEs of a 16 MiB file written back after one odd write-back: `(offset, len)`.
fn shifted_writes() -> Vec<(u64, u64)> {
    let mut w = vec![(0, SHIFT)];
    let mut at = SHIFT;
    while at + MIB <= 16 * MIB {
        w.push((at, MIB));
        at += MIB;
    }
    w.push((at, 16 * MIB - at));
    w
}

/// Writes `order` (indices into `writes`) of `data` into a new file `name`, then syncs.
fn write_in(fs: &mut Fs, name: &str, data: &[u8], writes: &[(u64, u64)], order: &[usize]) -> u64 {
    let root = fs.root();
    let f = fs.mknod(root, name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let j0 = journal(fs);
    for &i in order {
        let (at, len) = writes[i];
        fs.write(f, at, &data[at as usize..(at + len) as usize]).unwrap();
    }
    let journaled = journal(fs) - j0;
    fs.fsync().unwrap();
    journaled
}

/// A crash (`fs` dropped: the journal is replayed at the next open), then file `f` must
/// read `want`; closed, the store must check clean.
fn crash_and_compare(fs: Fs, dir: &std::path::Path, want: &[u8]) {
    drop(fs);
    let mut fs = open(dir);
    let root = fs.root();
    let f = lookup(&mut fs, root, "f").unwrap();
    assert!(read_all(&mut fs, f) == want, "the file differs after the crash");
    fs.close().unwrap();
    committed(dir);
}

/// In order (each WRITE taken after the one before it), no piece stays journaled: the
/// journal gets records of blocks only. Before, each chunk's two pieces went to it (the
/// next write's head piece, 24 KiB here, and this one's tail, 40 KiB): 960 KiB for 16 MiB.
#[test]
fn a_shifted_stream_in_order_journals_no_pieces() {
    let (_tmp, dir, mut fs) = new_store();
    let data = bytes(16 * MIB, 1);
    let writes = shifted_writes();
    let order: Vec<usize> = (0..writes.len()).collect();
    let journaled = write_in(&mut fs, "f", &data, &writes, &order);
    // The first write's tail piece stays (nothing precedes it to complete), and the records.
    assert!(journaled < 64 << 10, "{journaled} journal bytes for 16 MiB written in order");
    crash_and_compare(fs, &dir, &data);
}

/// Each pair taken the other way round (the later WRITE first), as the daemon's threads
/// may take them. Where the later write comes first, its head piece (4 KiB here) is
/// journaled, and the earlier one's tail then completes the chunk. Where the earlier write
/// comes first and another came between (the next pair's later one), its tail piece (60
/// KiB), the journal's last record, floats over that one's records until the write that
/// brings the rest of its chunk takes it back. So only the head pieces stay journaled,
/// where before both pieces of every chunk were (1 MiB for these 16 MiB).
#[test]
fn a_shifted_stream_out_of_order_journals_one_piece_a_chunk() {
    let (_tmp, dir, mut fs) = new_store();
    let data = bytes(16 * MIB, 2);
    let writes = shifted_writes();
    let mut order: Vec<usize> = Vec::new();
    for pair in (0..writes.len()).collect::<Vec<_>>().chunks(2) {
        order.extend(pair.iter().rev());
    }
    let journaled = write_in(&mut fs, "f", &data, &writes, &order);
    let (pairs, head) = (writes.len() as u64 / 2, (64 << 10) - SHIFT % (64 << 10));
    assert!(journaled < pairs * head + (64 << 10), "{journaled} journal bytes for 16 MiB, pairs reversed");
    crash_and_compare(fs, &dir, &data);
}

/// Something between two WRITEs (another file's record, a sync) ends the take-back; the
/// chunk still goes to a pack whole, and everything reads back after a crash. A write
/// that only overwrites (no growth) completes chunks the same way.
#[test]
fn pieces_completed_across_other_records_and_syncs() {
    let (_tmp, dir, mut fs) = new_store();
    let data = bytes(16 * MIB, 3);
    let writes = shifted_writes();
    let root = fs.root();
    let f = fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    let g = fs.mknod(root, b"g", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino;
    for (i, &(at, len)) in writes.iter().enumerate() {
        fs.write(f, at, &data[at as usize..(at + len) as usize]).unwrap();
        match i % 3 {
            0 => {
                fs.write(g, i as u64 * 10, b"between").unwrap();
            }
            1 => fs.fsync().unwrap(),
            _ => {}
        }
    }
    // Overwrites of the same ranges, shifted again, after a checkpoint.
    fs.checkpoint().unwrap();
    let again = bytes(16 * MIB, 4);
    for &(at, len) in writes.iter().skip(1).take(6) {
        let at = at + 4096;
        fs.write(f, at, &again[at as usize..(at + len) as usize]).unwrap();
    }
    let mut want = data.clone();
    for &(at, len) in writes.iter().skip(1).take(6) {
        let at = (at + 4096) as usize;
        want[at..at + len as usize].copy_from_slice(&again[at..at + len as usize]);
    }
    assert!(read_all(&mut fs, f) == want, "the file differs before the crash");
    fs.fsync().unwrap();
    crash_and_compare(fs, &dir, &want);
}
