//! Injected host faults, driven as a library on the simulated host: each case makes chosen
//! reads, writes or syncs fail (EIO, ENOSPC) or return flipped bits, checks what the
//! operations see, then "restarts the daemon" (drops the engine without a clean close and
//! opens the store again with the fault lifted) and requires a clean `check` and every
//! fsynced byte. The table of docs/testing.md comes from these cases; run with
//! `--nocapture` to print it.

use scion_fs::{Fs, Ino, Kind, MountOptions, SetAttr};
use scion_store::faults::{parse, FaultyHost};
use scion_store::sim::SimHost;
use scion_store::Host;
use std::path::Path;
use std::sync::Arc;

const STORE: &str = "/store";

fn open_on(host: Host) -> Result<Fs, String> {
    Fs::open(
        Path::new(STORE),
        MountOptions {
            holder: "fault test".into(),
            host,
        },
    )
    .map_err(|e| e.to_string())
}

fn new_store() -> SimHost {
    let sim = SimHost::default();
    Fs::create(&(Arc::new(sim.clone()) as Host), Path::new(STORE)).unwrap();
    sim
}

fn faulty(sim: &SimHost, spec: &str) -> Host {
    Arc::new(FaultyHost::new(Arc::new(sim.clone()), parse(spec).unwrap()))
}

/// Opens the store, then arms the faults of `spec` (so the open itself is not hit).
fn open_armed(sim: &SimHost, spec: &str) -> Fs {
    let h = Arc::new(FaultyHost::new(Arc::new(sim.clone()), parse(spec).unwrap()));
    h.arm(false);
    let fs = open_on(h.clone()).unwrap();
    h.arm(true);
    fs
}

fn create(fs: &mut Fs, name: &str, data: &[u8]) -> scion_fs::FsResult<Ino> {
    let a = fs.mknod(fs.root(), name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[])?;
    fs.write(a.ino, 0, data)?;
    Ok(a.ino)
}

fn read(fs: &mut Fs, name: &str) -> scion_fs::FsResult<Vec<u8>> {
    let a = fs.lookup(fs.root(), name.as_bytes())?;
    fs.read(a.ino, 0, a.size as u32 + 1)
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| seed.wrapping_add((i / 13) as u8)).collect()
}

/// Restart with the fault lifted: the store must open, check clean and hold `expect`.
fn restart_and_verify(sim: &SimHost, expect: &[(&str, &[u8])]) {
    let h: Host = Arc::new(sim.clone());
    let rep = scion_fs::check::check(&h, Path::new(STORE)).unwrap();
    assert!(rep.is_clean(), "check before reopening:\n{rep}");
    let mut fs = open_on(h.clone()).expect("reopen with the fault lifted");
    for (name, data) in expect {
        assert_eq!(read(&mut fs, name).as_deref(), Ok(*data), "{name} after restart");
    }
    fs.close().unwrap();
    let rep = scion_fs::check::check(&h, Path::new(STORE)).unwrap();
    assert!(rep.is_clean(), "check after reopening:\n{rep}");
}

fn row(fault: &str, spec: &str, seen: &str) {
    println!("| {fault} | `{spec}` | {seen} |");
}

#[test]
fn write_fault_in_packs_fails_the_write_only() {
    let sim = new_store();
    let spec = "write:packs/:eio:count=1";
    let mut fs = open_armed(&sim, "");
    let keep = pattern(1, 5000);
    create(&mut fs, "kept", &keep).unwrap();
    fs.fsync().unwrap();
    drop(fs);
    let mut fs = open_armed(&sim, spec);
    let big = pattern(2, 3 * 65536);
    let r = create(&mut fs, "big", &big);
    assert_eq!(
        r.err(),
        Some(scion_fs::errno::EIO),
        "a write whose blocks cannot be written fails with EIO"
    );
    // The same write again (the fault is spent) succeeds; the other file is untouched.
    let a = fs.lookup(fs.root(), b"big").unwrap();
    fs.write(a.ino, 0, &big).unwrap();
    fs.fsync().unwrap();
    assert_eq!(read(&mut fs, "kept").unwrap(), keep);
    drop(fs);
    restart_and_verify(&sim, &[("kept", &keep), ("big", &big)]);
    row(
        "EIO writing a data block",
        spec,
        "that write(2) gets EIO; a retry succeeds; other files untouched; clean after restart",
    );
}

#[test]
fn full_journal_write_fails_fsync_and_is_retried() {
    let sim = new_store();
    let spec = "write:journal/:enospc:count=1";
    let mut fs = open_armed(&sim, spec);
    let data = pattern(3, 3000);
    create(&mut fs, "f", &data).unwrap();
    assert_eq!(fs.fsync(), Err(scion_fs::errno::ENOSPC), "fsync reports the full host");
    // Nothing was synced, so nothing was dropped: the next fsync writes the same records.
    fs.fsync().unwrap();
    drop(fs);
    restart_and_verify(&sim, &[("f", &data)]);
    row(
        "ENOSPC writing the journal",
        spec,
        "fsync(2) gets ENOSPC; the next fsync writes the same records and succeeds; data there after restart",
    );
}

#[test]
fn a_change_whose_journal_write_fails_leaves_no_trace() {
    let sim = new_store();
    let mut fs = open_armed(&sim, "");
    let keep = pattern(10, 2000);
    create(&mut fs, "kept", &keep).unwrap();
    fs.fsync().unwrap();
    drop(fs);
    // Records are buffered up to 4 MiB and written when the buffer fills: the change whose
    // record fills it is the one whose journal write fails.
    let spec = "write:journal/:enospc:count=1";
    let mut fs = open_armed(&sim, spec);
    let mut failed = None;
    // (Files small enough to live in their inode records, so that their bytes are journaled;
    // a larger file written at once has its bytes in a pack and only a pointer journaled.)
    for i in 0..4000 {
        if let Err(e) = create(&mut fs, &format!("n{i}"), &pattern(i as u8, 2000)) {
            assert_eq!(e, libc::ENOSPC);
            failed = Some(i);
            break;
        }
    }
    let i = failed.expect("4 MiB of records were buffered without a journal write");
    // The fault is spent, but the change was made in memory and refused: the volume
    // refuses everything after it, so that neither a later fsync nor a checkpoint makes it
    // durable.
    assert_eq!(create(&mut fs, "after", b"x").err(), Some(scion_fs::errno::EIO));
    assert_eq!(fs.fsync(), Err(scion_fs::errno::EIO));
    assert!(fs.checkpoint().is_err());
    assert_eq!(read(&mut fs, "kept").unwrap(), keep, "reads go on");
    drop(fs);
    restart_and_verify(&sim, &[("kept", &keep)]);
    let mut fs = open_on(Arc::new(sim.clone())).unwrap();
    assert_eq!(
        read(&mut fs, &format!("n{i}")).err(),
        Some(scion_fs::errno::ENOENT),
        "the failed change"
    );
    assert_eq!(read(&mut fs, "after").err(), Some(scion_fs::errno::ENOENT));
    row(
        "ENOSPC writing the journal buffer (4 MiB of records)",
        spec,
        "the change whose record filled the buffer gets ENOSPC; changes and fsync get EIO until restart, reads go on; after restart the refused change left no trace, clean",
    );
}

#[test]
fn failed_fsync_refuses_changes_until_restart() {
    let sim = new_store();
    let spec = "sync:journal/:eio:after=1:count=1";
    let mut fs = open_armed(&sim, spec);
    let first = pattern(4, 2000);
    create(&mut fs, "first", &first).unwrap();
    fs.fsync().unwrap();
    create(&mut fs, "second", &pattern(5, 2000)).unwrap();
    assert_eq!(fs.fsync(), Err(scion_fs::errno::EIO));
    assert_eq!(
        create(&mut fs, "third", b"x").err(),
        Some(scion_fs::errno::EIO),
        "changes refused after a failed fsync"
    );
    assert_eq!(read(&mut fs, "first").unwrap(), first, "reads still served");
    drop(fs);
    restart_and_verify(&sim, &[("first", &first)]);
    row("EIO from fsync of the journal", spec, "fsync(2) gets EIO; later changes get EIO (the host may have dropped the unsynced pages), reads go on; after restart everything fsynced before is there, clean");
}

#[test]
fn failed_checkpoint_refuses_changes_until_restart() {
    let sim = new_store();
    let spec = "write:superblock:eio:count=1";
    let mut fs = open_armed(&sim, spec);
    let data = pattern(6, 70_000);
    create(&mut fs, "f", &data).unwrap();
    fs.fsync().unwrap();
    assert!(fs.checkpoint().is_err());
    assert_eq!(create(&mut fs, "g", b"y").err(), Some(scion_fs::errno::EIO));
    assert_eq!(read(&mut fs, "f").unwrap(), data);
    drop(fs);
    restart_and_verify(&sim, &[("f", &data)]);
    row("EIO writing the superblock (checkpoint)", spec, "the checkpoint fails; changes get EIO until restart, reads go on; the previous checkpoint and the journal give everything back, clean");
}

#[test]
fn flipped_bits_on_read_give_eio_to_that_file_only() {
    let sim = new_store();
    let mut fs = open_armed(&sim, "");
    let a = pattern(7, 65536);
    let b = pattern(8, 65536);
    create(&mut fs, "a", &a).unwrap();
    create(&mut fs, "b", &b).unwrap();
    fs.close().unwrap();
    // Every read of the packs after opening returns a flipped bit: reading a file's block
    // is refused, never returned damaged.
    let spec = "read:packs/:flip";
    let mut fs = open_armed(&sim, spec);
    assert_eq!(read(&mut fs, "a").err(), Some(scion_fs::errno::EIO));
    assert_eq!(read(&mut fs, "b").err(), Some(scion_fs::errno::EIO));
    drop(fs);
    // One flip only: the next read of that block is clean.
    let spec1 = "read:packs/:flip:count=1";
    let mut fs = open_armed(&sim, spec1);
    let first = read(&mut fs, "a");
    assert_eq!(first.err(), Some(scion_fs::errno::EIO));
    assert_eq!(read(&mut fs, "a").unwrap(), a);
    assert_eq!(read(&mut fs, "b").unwrap(), b);
    drop(fs);
    restart_and_verify(&sim, &[("a", &a), ("b", &b)]);
    row("a flipped bit in every read of a pack", spec, "reads of file data get EIO (checksum), never wrong bytes; with `count=1` only the one read fails; nothing on disk changed, clean after restart");
}

#[test]
fn read_errors_at_open_are_clear_and_harmless() {
    let sim = new_store();
    let mut fs = open_armed(&sim, "");
    let data = pattern(9, 1000);
    create(&mut fs, "f", &data).unwrap();
    fs.fsync().unwrap();
    drop(fs);
    for spec in [
        "read:journal/:eio",
        "read:superblock:eio",
        "read:packs/:eio",
        "open:packs/:eio",
    ] {
        let e = open_on(faulty(&sim, spec))
            .err()
            .unwrap_or_else(|| panic!("open succeeded under {spec}"));
        assert!(e.contains("Input/output error") || e.contains("I/O"), "{spec}: {e}");
        row(
            "EIO at mount",
            spec,
            &format!("mount fails with `{e}`; once lifted it mounts and holds the data, clean"),
        );
    }
    restart_and_verify(&sim, &[("f", &data)]);
}

#[test]
fn punch_failures_only_keep_space() {
    let sim = new_store();
    let spec = "punch:*:eio";
    let mut fs = open_armed(&sim, spec);
    let data = pattern(10, 4 * 65536);
    let ino = create(&mut fs, "f", &data).unwrap();
    fs.checkpoint().unwrap();
    fs.setattr(
        ino,
        SetAttr {
            size: Some(1000),
            ..Default::default()
        },
    )
    .unwrap();
    fs.checkpoint()
        .expect("a failed hole punch after commit does not fail the checkpoint");
    create(&mut fs, "g", b"after").unwrap();
    fs.fsync().unwrap();
    drop(fs);
    restart_and_verify(&sim, &[("f", &data[..1000]), ("g", b"after")]);
    row(
        "EIO from hole punching",
        spec,
        "nothing fails; the freed blocks keep their space until a later open punches them again; clean",
    );
}

#[test]
fn full_host_refuses_writes_and_keeps_the_store() {
    let sim = new_store();
    sim.set_capacity(48 << 20);
    let mut fs = open_on(Arc::new(sim.clone())).unwrap();
    let mut written = Vec::new();
    let mut refused = None;
    for i in 0..64 {
        let name = format!("f{i}");
        let data = pattern(i as u8, 1 << 20);
        match create(&mut fs, &name, &data) {
            Ok(_) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
        if let Err(e) = fs.fsync() {
            refused = Some(e);
            break;
        }
        written.push((name, data));
    }
    assert_eq!(refused, Some(scion_fs::errno::ENOSPC), "a full host gives ENOSPC");
    assert!(written.len() > 8, "only {} MiB fitted in 48", written.len());
    // Removing files still works on a full host, and checkpoints still commit.
    fs.unlink(fs.root(), written[0].0.as_bytes()).unwrap();
    written.remove(0);
    fs.fsync().unwrap();
    fs.checkpoint().unwrap();
    drop(fs);
    let expect: Vec<(&str, &[u8])> = written.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
    restart_and_verify(&sim, &expect);
    row(
        "host filesystem full (simulated 48 MiB)",
        "capacity",
        &format!(
            "write(2) gets ENOSPC once less than the checkpoint reserve is left ({} MiB fitted); unlink and checkpoints still work; every fsynced file there after restart, clean",
            written.len() + 1
        ),
    );
}
