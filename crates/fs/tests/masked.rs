//! Clones and snapshots made for an ordinary user (`NsInfo::masked_for`): the setuid and
//! setgid bits and file capabilities of files the user does not own are hidden in them (the
//! stored records keep them), their own files keep theirs, directories keep setgid, copies
//! of such a clone inherit it, and it survives a crash (journal records 16 and 17) and a
//! checkpoint (namespace records of version 4).

mod common;
use common::*;
use scion_fs::clone::ForUser;
use scion_fs::{Fs, Ino, Kind};

const CAP: &[u8] = b"security.capability";

fn tree(fs: &mut Fs) -> (Ino, Ino) {
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o2775, 0, 1000, 1000, 0, &[]).unwrap().ino;
    let rootprog = fs.mknod(src, b"rootprog", Kind::File, 0o4755, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.setxattr(rootprog, CAP, b"\x01\x00\x00\x02", 0).unwrap();
    fs.mknod(src, b"sgid", Kind::File, 0o2755, 0, 0, 50, 0, &[]).unwrap();
    fs.mknod(src, b"mine", Kind::File, 0o4755, 0, 1000, 1000, 0, &[]).unwrap();
    (root, src)
}

fn perm(fs: &mut Fs, dir: Ino, name: &str) -> u16 {
    let ino = lookup(fs, dir, name).unwrap();
    fs.getattr(ino).unwrap().perm
}

fn check_masked(fs: &mut Fs, c: Ino, what: &str) {
    assert_eq!(perm(fs, c, "rootprog"), 0o755, "{what}: another's setuid hidden");
    assert_eq!(perm(fs, c, "sgid"), 0o755, "{what}: another's setgid hidden");
    assert_eq!(perm(fs, c, "mine"), 0o4755, "{what}: the user's own setuid kept");
    let prog = lookup(fs, c, "rootprog").unwrap();
    assert_eq!(fs.getxattr(prog, CAP), Err(scion_fs::errno::ENODATA), "{what}: capability hidden");
    assert!(!fs.listxattr(prog).unwrap().iter().any(|x| x == CAP), "{what}");
}

#[test]
fn a_users_copies_hide_others_privileges() {
    let (_tmp, store, mut fs) = new_store();
    let (root, src) = tree(&mut fs);
    let c = fs.clone_dir_for(src, root, b"c", &[], b"/src", Some(ForUser { uid: 1000, gid: 1000 })).unwrap();
    check_masked(&mut fs, c, "user's clone");
    assert_eq!(fs.getattr(c).unwrap().perm, 0o2775, "a directory keeps setgid");
    // Root's own clone, and the source, show everything.
    let r = fs.clone_dir(src, root, b"r", &[], b"/src").unwrap();
    assert_eq!(perm(&mut fs, r, "rootprog"), 0o4755);
    assert_eq!(perm(&mut fs, src, "rootprog"), 0o4755);
    let prog = lookup(&mut fs, src, "rootprog").unwrap();
    assert!(fs.getxattr(prog, CAP).is_ok());
    // A snapshot of the user's clone, even root's, and a clone of that: still hidden.
    fs.snapshot(c, b"s", b"/c").unwrap();
    let snapdir = fs.lookup(c, b".snapshot").unwrap().ino;
    let s = fs.lookup(snapdir, b"s").unwrap().ino;
    check_masked(&mut fs, s, "snapshot of the clone");
    let cc = fs.clone_dir(c, root, b"cc", &[], b"/c").unwrap();
    check_masked(&mut fs, cc, "clone of the clone");
    // A user's snapshot of the source itself.
    fs.snapshot_for(src, b"u", b"/src", false, scion_fs::Ts::now(), Some(1000)).unwrap();
    let snapdir = fs.lookup(src, b".snapshot").unwrap().ino;
    let u = fs.lookup(snapdir, b"u").unwrap().ino;
    check_masked(&mut fs, u, "user's snapshot");
    // Journaled only (no checkpoint since): a crash keeps the marks.
    fs.fsync().unwrap();
    drop(fs); // no checkpoint: the next open replays the journal
    let mut fs = open(&store);
    let root = fs.root();
    let c = lookup(&mut fs, root, "c").unwrap();
    check_masked(&mut fs, c, "user's clone after a crash");
    let src = lookup(&mut fs, root, "src").unwrap();
    let snapdir = fs.lookup(src, b".snapshot").unwrap().ino;
    let u = fs.lookup(snapdir, b"u").unwrap().ino;
    check_masked(&mut fs, u, "user's snapshot after a crash");
    fs.checkpoint().unwrap();
    drop(fs);
    let rep = committed(&store);
    assert!(rep.is_clean(), "{rep}");
    let mut fs = open(&store);
    let root = fs.root();
    let c = lookup(&mut fs, root, "c").unwrap();
    check_masked(&mut fs, c, "user's clone after a checkpoint");
}

/// A user's clone and snapshot acknowledged and then lost to a crash before any checkpoint
/// come back from the journal (records 16 and 17) still made for the user.
#[test]
fn the_journal_keeps_who_a_copy_was_made_for() {
    let (_tmp, store, mut fs) = new_store();
    let (root, src) = tree(&mut fs);
    fs.checkpoint().unwrap();
    fs.clone_dir_for(src, root, b"c", &[], b"/src", Some(ForUser { uid: 1000, gid: 1000 })).unwrap();
    fs.snapshot_for(src, b"u", b"/src", false, scion_fs::Ts::now(), Some(1000)).unwrap();
    drop(fs); // no checkpoint: the next open replays the journal
    let mut fs = open(&store);
    let root = fs.root();
    let c = lookup(&mut fs, root, "c").unwrap();
    check_masked(&mut fs, c, "clone replayed");
    let src = lookup(&mut fs, root, "src").unwrap();
    let snapdir = fs.lookup(src, b".snapshot").unwrap().ino;
    let u = fs.lookup(snapdir, b"u").unwrap().ino;
    check_masked(&mut fs, u, "snapshot replayed");
}

/// A user's clone of another's tree has a top that is theirs (as their `cp -a` would make
/// it: their group unless they are in the source's, no setuid or setgid bit), the files below
/// keep their owners, and it records who made it: root's snapshot of it inherits the mask but
/// was not made by the user. All of it survives a crash (journal record 19) and a checkpoint.
#[test]
fn a_users_clone_of_anothers_tree_is_theirs_at_the_top() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"theirs", Kind::Dir, 0o2775, 0, 2000, 2000, 0, &[]).unwrap().ino;
    fs.mknod(src, b"f", Kind::File, 0o644, 0, 2000, 2000, 0, &[]).unwrap();
    fs.checkpoint().unwrap();
    let c = fs.clone_dir_for(src, root, b"c", &[], b"/theirs", Some(ForUser { uid: 1000, gid: 1000 })).unwrap();
    let check = |fs: &mut Fs, what: &str| {
        let root = fs.root();
        let c = lookup(fs, root, "c").unwrap();
        let a = fs.getattr(c).unwrap();
        assert_eq!((a.uid, a.gid, a.perm), (1000, 1000, 0o775), "{what}: the top is the user's");
        let f = lookup(fs, c, "f").unwrap();
        assert_eq!(fs.getattr(f).unwrap().uid, 2000, "{what}: files below keep their owner");
        let ns = fs.ns_at(c).unwrap();
        assert_eq!(fs.ns_info(ns).unwrap().made_by, Some(1000), "{what}: made by the user");
        let snapdir = fs.lookup(c, b".snapshot").unwrap().ino;
        let s = fs.lookup(snapdir, b"rs").unwrap().ino;
        let sns = fs.ns_at(s).unwrap();
        let info = fs.ns_info(sns).unwrap();
        assert_eq!((info.masked_for, info.made_by), (Some(1000), None), "{what}: root's snapshot of it");
        let src = lookup(fs, root, "theirs").unwrap();
        assert_eq!(fs.getattr(src).unwrap().uid, 2000, "{what}: the source unchanged");
    };
    fs.snapshot(c, b"rs", b"/c").unwrap();
    check(&mut fs, "made");
    drop(fs); // no checkpoint: the next open replays the journal
    let mut fs = open(&store);
    check(&mut fs, "replayed");
    fs.checkpoint().unwrap();
    drop(fs);
    let rep = committed(&store);
    assert!(rep.is_clean(), "{rep}");
    let mut fs = open(&store);
    check(&mut fs, "after a checkpoint");
}

/// A device node in a copy made for a user who does not own it names no device (0:0), so
/// a clone of a root file system gives them no device they could not open by hand; root's
/// own clone keeps it.
#[test]
fn a_users_copies_hide_device_numbers() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"rootfs", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    fs.mknod(src, b"kmsg", Kind::CharDev, 0o644, 0, 0, 0, (1 << 8) | 11, &[]).unwrap();
    fs.mknod(src, b"sda", Kind::BlockDev, 0o660, 0, 0, 6, (8 << 8) | 0, &[]).unwrap();
    fs.mknod(src, b"fifo", Kind::Fifo, 0o644, 0, 0, 0, 0, &[]).unwrap();
    let c = fs.clone_dir_for(src, root, b"c", &[], b"/rootfs", Some(ForUser { uid: 1000, gid: 1000 })).unwrap();
    for name in ["kmsg", "sda"] {
        let ino = lookup(&mut fs, c, name).unwrap();
        assert_eq!(fs.getattr(ino).unwrap().rdev, 0, "{name} in the user's clone");
    }
    let f = lookup(&mut fs, c, "fifo").unwrap();
    assert_eq!(fs.getattr(f).unwrap().kind, Kind::Fifo);
    let r = fs.clone_dir(src, root, b"r", &[], b"/rootfs").unwrap();
    let k = lookup(&mut fs, r, "kmsg").unwrap();
    assert_eq!(fs.getattr(k).unwrap().rdev, (1 << 8) | 11, "root's clone keeps it");
}
