//! Reaching inodes by number alone (`Fs::reach`, `Fs::walk_step`), as NFS handles do after
//! a restart: random trees (files, directories, renames, removals, second names, a clone),
//! then the store opened again, fresh or after a crash; every inode with a name is found by
//! its number, through its hint or by a walk, as the same file; every removed one is not.

mod common;
use common::*;
use proptest::prelude::*;
use scion_fs::reach::Walk;
use scion_fs::{Fs, FsResult, Ino, Kind, ROOT_INO};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    File(u8, u8),
    Dir(u8, u8),
    /// Renames entry (dir, pick) to (dir, name).
    Move(u8, u8, u8, u8),
    Remove(u8, u8),
    Link(u8, u8, u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<u8>(), any::<u8>()).prop_map(|(d, n)| Op::File(d, n)),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(d, n)| Op::Dir(d, n)),
        2 => (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(a, b, c, d)| Op::Move(a, b, c, d)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(d, n)| Op::Remove(d, n)),
        1 => (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(a, b, c, d)| Op::Link(a, b, c, d)),
    ]
}

/// Directories of the main tree, loaded (looked up) as the ops go.
fn dirs(fs: &mut Fs) -> Vec<Ino> {
    let mut out = vec![ROOT_INO];
    let mut i = 0;
    while i < out.len() {
        for e in fs.readdir(out[i]).unwrap() {
            if e.kind == Kind::Dir && e.name != b".snapshot" && e.ino >> 40 == 0 {
                out.push(fs.lookup(out[i], &e.name).unwrap().ino);
            }
        }
        i += 1;
    }
    out
}

fn pick<T: Clone>(v: &[T], i: u8) -> Option<T> {
    (!v.is_empty()).then(|| v[i as usize % v.len()].clone())
}

fn entries(fs: &mut Fs, dir: Ino) -> Vec<(Vec<u8>, Ino, Kind)> {
    fs.readdir(dir).unwrap().into_iter().filter(|e| e.name != b".snapshot").map(|e| (e.name, e.ino, e.kind)).collect()
}

fn apply(fs: &mut Fs, op: &Op, removed: &mut Vec<Ino>) {
    let ds = dirs(fs);
    let name = |n: u8| format!("n{}", n % 16).into_bytes();
    match *op {
        Op::File(d, n) => {
            let d = pick(&ds, d).unwrap();
            let _ = fs.mknod(d, &name(n), Kind::File, 0o644, 0, 0, 0, 0, &[]).map(|a| fs.write(a.ino, 0, &a.ino.to_le_bytes()));
        }
        Op::Dir(d, n) => {
            let d = pick(&ds, d).unwrap();
            let _ = fs.mknod(d, &name(n), Kind::Dir, 0o755, 0, 0, 0, 0, &[]);
        }
        Op::Move(a, b, c, n) => {
            let (from, to) = (pick(&ds, a).unwrap(), pick(&ds, c).unwrap());
            if let Some((old, _, _)) = pick(&entries(fs, from), b) {
                let _ = fs.rename(from, &old, to, &name(n), 0);
            }
        }
        Op::Remove(a, b) => {
            let d = pick(&ds, a).unwrap();
            if let Some((old, ino, kind)) = pick(&entries(fs, d), b) {
                let r = if kind == Kind::Dir { fs.rmdir(d, &old) } else { fs.unlink(d, &old) };
                if r.is_ok() && fs.getattr(ino).map_or(true, |a| a.nlink == 0) {
                    removed.push(ino);
                }
            }
        }
        Op::Link(a, b, c, n) => {
            let (from, to) = (pick(&ds, a).unwrap(), pick(&ds, c).unwrap());
            if let Some((_, ino, Kind::File)) = pick(&entries(fs, from), b) {
                let _ = fs.link(ino, to, &name(n));
            }
        }
    }
}

/// Every inode below `dir` (clones included) with what a reader sees of it.
fn everything(fs: &mut Fs, dir: Ino, out: &mut BTreeMap<Ino, (Kind, u64, Vec<u8>)>) {
    for (name, _, _) in entries(fs, dir) {
        let a = fs.lookup(dir, &name).unwrap();
        let data = if a.kind == Kind::File { read_all(fs, a.ino) } else { Vec::new() };
        out.insert(a.ino, (a.kind, a.size, data));
        if a.kind == Kind::Dir {
            everything(fs, a.ino, out);
        }
    }
}

fn walk(fs: &mut Fs, ino: Ino) -> FsResult<Ino> {
    let mut w = Walk::new(ino);
    loop {
        if let Some(a) = fs.walk_step(&mut w)? {
            return Ok(a.ino);
        }
    }
}

fn run(ops: &[Op], crash: bool) {
    let (_tmp, store, mut fs) = new_store();
    let mut removed = Vec::new();
    for op in ops {
        apply(&mut fs, op, &mut removed);
    }
    let src = pick(&dirs(&mut fs), 7).unwrap();
    if src != ROOT_INO {
        let _ = fs.clone_dir(src, ROOT_INO, b"clone", &[], b"src");
    }
    let mut want = BTreeMap::new();
    everything(&mut fs, ROOT_INO, &mut want);
    let hints: BTreeMap<Ino, Vec<Vec<u8>>> = want.keys().filter_map(|&i| fs.names_of(i).map(|n| (i, n))).collect();
    // Hints name every inode with one name; one with several is reached through the link table.
    assert_eq!(hints.len(), want.len(), "names_of missed an inode");
    forgotten_and_found(&mut fs, &want);
    fs.fsync().unwrap();
    if crash {
        drop(fs);
    } else {
        fs.close().unwrap();
    }
    for by_walk in [false, true] {
        let mut fs = open(&store);
        for (&ino, (kind, size, data)) in &want {
            let found = if by_walk {
                match fs.reach(ino, &[]).unwrap() {
                    Some(a) => a.ino,
                    None => walk(&mut fs, ino).unwrap_or_else(|e| panic!("inode {ino:#x} not found by a walk: {e}")),
                }
            } else {
                let a = fs.reach(ino, &hints[&ino]).unwrap();
                a.unwrap_or_else(|| panic!("inode {ino:#x} not found by its hint {:?}", hints[&ino])).ino
            };
            assert_eq!(found, ino);
            let a = fs.getattr(ino).unwrap();
            assert_eq!((a.kind, a.size), (*kind, *size), "inode {ino:#x}");
            if a.kind == Kind::File {
                assert_eq!(&read_all(&mut fs, ino), data, "inode {ino:#x}");
            }
            // Its parents lead to the mount's root (through a clone's mount entry too), as
            // for an inode looked up by name; a file kept in the link table (one that has
            // had several names) has no one parent.
            if a.kind == Kind::Dir || fs.parent_of(ino) != ino {
                let mut cur = ino;
                for _ in 0..256 {
                    if cur == ROOT_INO {
                        break;
                    }
                    let p = fs.parent_of(cur);
                    assert_ne!(p, cur, "inode {ino:#x}: {cur:#x} has no parent");
                    cur = p;
                }
                assert_eq!(cur, ROOT_INO, "inode {ino:#x}");
            }
        }
        for &ino in removed.iter().filter(|i| !want.contains_key(i)) {
            let r = fs.reach(ino, &[]);
            assert!(matches!(r, Ok(None)) || r.is_err(), "removed inode {ino:#x} reached: {r:?}");
            if matches!(r, Ok(None)) {
                assert!(walk(&mut fs, ino).is_err(), "removed inode {ino:#x} found by a walk");
            }
        }
        // Numbers no namespace has are refused at once.
        assert!(fs.reach(1 << 39, &[]).is_err());
        assert!(fs.reach(500 << 40 | 2, &[]).is_err());
        fs.close().unwrap();
    }
}

/// The kernel forgets every inode (its caches dropped) and a checkpoint lets them leave
/// memory; each is then found by number alone from where it was (`Whereabouts`), without a
/// hint or a walk, as a file handle's inode is after `drop_caches`.
fn forgotten_and_found(fs: &mut Fs, want: &BTreeMap<Ino, (Kind, u64, Vec<u8>)>) {
    let before = fs.memory().inodes;
    for &ino in want.keys() {
        let held = fs.references(ino);
        fs.forget(ino, held);
    }
    fs.checkpoint().unwrap();
    let after = fs.memory().inodes;
    let files = want.values().filter(|(k, _, _)| *k != Kind::Dir).count();
    assert!(after < before || files == 0, "nothing left memory: {after} of {before} inodes loaded");
    for (&ino, (kind, size, _)) in want {
        let a = fs.reach(ino, &[]).unwrap().unwrap_or_else(|| panic!("forgotten inode {ino:#x} not found where it was"));
        assert_eq!((a.ino, a.kind, a.size), (ino, *kind, *size));
        fs.forget(ino, 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_named_inode_is_reached_by_number(ops in prop::collection::vec(op(), 1..60), crash in any::<bool>()) {
        run(&ops, crash);
    }
}
