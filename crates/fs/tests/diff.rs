//! `Fs::diff` differentially: random trees (with hard links), cloned, then changed on both sides (writes, some
//! of equal bytes, chmods, xattrs, removals, new files and directories, kind changes, some
//! checkpointed and some not); the diff of the two, both ways round, equals a naive walk of
//! both trees that reads every file. And the cost: one change in a tree of 20,000 files
//! compares a handful of directories.

mod common;
use common::*;
use rand::{Rng, SeedableRng};
use scion_fs::diff::{Change, DiffOptions};
use scion_fs::{Fs, Ino, Kind, SetAttr};

/// The naive diff: every name of both trees, files compared by their bytes.
fn naive(fs: &mut Fs, a: Ino, b: Ino, path: &str, out: &mut Vec<(char, String)>) {
    let names = |fs: &mut Fs, d: Ino| -> Vec<Vec<u8>> {
        fs.readdir(d).unwrap().into_iter().map(|e| e.name).filter(|n| n != b".snapshot").collect()
    };
    let mut all = names(fs, a);
    all.extend(names(fs, b));
    all.sort();
    all.dedup();
    for n in all {
        let p = if path.is_empty() { String::from_utf8_lossy(&n).into_owned() } else { format!("{path}/{}", String::from_utf8_lossy(&n)) };
        match (fs.lookup(a, &n).ok(), fs.lookup(b, &n).ok()) {
            (Some(x), None) => {
                fs.forget(x.ino, 1);
                out.push(('D', p));
            }
            (None, Some(y)) => {
                fs.forget(y.ino, 1);
                out.push(('A', p));
            }
            (Some(x), Some(y)) => {
                let meta = |fs: &mut Fs, i: Ino| {
                    let a = fs.getattr(i).unwrap();
                    let mut xs: Vec<(Vec<u8>, Vec<u8>)> =
                        fs.listxattr(i).unwrap().into_iter().map(|k| { let v = fs.getxattr(i, &k).unwrap(); (k, v) }).collect();
                    xs.sort();
                    (a.perm, a.uid, a.gid, xs)
                };
                if x.kind != y.kind {
                    out.push(('T', p));
                } else if x.kind == Kind::Dir {
                    if meta(fs, x.ino) != meta(fs, y.ino) {
                        out.push(('m', p.clone()));
                    }
                    naive(fs, x.ino, y.ino, &p, out);
                } else {
                    let content = |fs: &mut Fs, i: Ino, k: Kind| if k == Kind::Symlink { fs.readlink(i).unwrap() } else { read_all(fs, i) };
                    if content(fs, x.ino, x.kind) != content(fs, y.ino, y.kind) {
                        out.push(('M', p));
                    } else if meta(fs, x.ino) != meta(fs, y.ino) {
                        out.push(('m', p));
                    }
                }
                fs.forget(x.ino, 1);
                fs.forget(y.ino, 1);
            }
            (None, None) => unreachable!(),
        }
    }
}

/// `Fs::diff` of `a` and `b` as (letter, path), and what the naive walk finds, sorted alike.
fn against_walk(fs: &mut Fs, a: Ino, b: Ino) -> (Vec<(char, String)>, Vec<(char, String)>) {
    let (got, _) = fs.diff(a, b, DiffOptions::default()).unwrap();
    let got = got.into_iter().map(|d| (d.change.letter(), String::from_utf8_lossy(&d.path).into_owned())).collect();
    let mut want = Vec::new();
    naive(fs, a, b, "", &mut want);
    want.sort_by(|x, y| scion_fs::diff::walk_cmp(x.1.as_bytes(), y.1.as_bytes()));
    (got, want)
}

fn data(rng: &mut rand::rngs::StdRng) -> Vec<u8> {
    let n = if rng.gen_bool(0.3) { rng.gen_range(70_000..200_000) } else { rng.gen_range(0..3000) };
    (0..n).map(|_| rng.gen_range(0..4u8)).collect()
}

fn build(fs: &mut Fs, rng: &mut rand::rngs::StdRng, dir: Ino, depth: u32) {
    for i in 0..rng.gen_range(2..6) {
        let name = format!("n{i}");
        match rng.gen_range(0..10) {
            0..=5 => {
                let d = data(rng);
                let f = mkfile(fs, dir, &name, &d);
                if rng.gen_bool(0.2) {
                    // A hard link: its record lives in each namespace's link table.
                    fs.link(f, dir, format!("{name}-ln").as_bytes()).unwrap();
                }
            }
            6 => {
                fs.mknod(dir, name.as_bytes(), Kind::Symlink, 0o777, 0, 0, 0, 0, b"n0").unwrap();
            }
            _ if depth < 3 => {
                let d = fs.mknod(dir, name.as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
                build(fs, rng, d, depth + 1);
            }
            _ => {}
        }
    }
}

/// A random change somewhere below `dir`.
fn change(fs: &mut Fs, rng: &mut rand::rngs::StdRng, dir: Ino) {
    let entries: Vec<_> = fs.readdir(dir).unwrap().into_iter().filter(|e| e.name != b".snapshot").collect();
    if entries.is_empty() || rng.gen_bool(0.15) {
        let name = format!("new{}", rng.gen_range(0..1000));
        if fs.lookup(dir, name.as_bytes()).is_err() {
            let d = data(rng);
            mkfile(fs, dir, &name, &d);
        }
        return;
    }
    let e = &entries[rng.gen_range(0..entries.len())];
    let a = fs.lookup(dir, &e.name).unwrap();
    if a.kind == Kind::Dir && rng.gen_bool(0.6) {
        change(fs, rng, a.ino);
        return;
    }
    match rng.gen_range(0..7) {
        0 if a.kind == Kind::File => {
            let off = rng.gen_range(0..=a.size);
            let len = rng.gen_range(1..5000);
            fs.write(a.ino, off, &vec![rng.gen_range(0..4u8); len]).unwrap();
        }
        1 if a.kind == Kind::File && a.size > 0 => {
            // The same bytes again: no change in content.
            let same = read_all(fs, a.ino);
            fs.write(a.ino, 0, &same).unwrap();
        }
        2 => {
            fs.setattr(a.ino, SetAttr { mode: Some(u32::from(a.perm ^ 0o020)), ..Default::default() }).unwrap();
        }
        3 => fs.setxattr(a.ino, b"user.t", &[rng.gen()], 0).unwrap(),
        4 if a.kind != Kind::Dir => {
            // The kind changes.
            fs.unlink(dir, &e.name).unwrap();
            fs.mknod(dir, &e.name, Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap();
        }
        5 if a.kind != Kind::Dir => fs.unlink(dir, &e.name).unwrap(),
        _ => {}
    }
    fs.forget(a.ino, 1);
}

#[test]
fn diff_equals_a_walk_of_both_trees() {
    for seed in 0..12u64 {
        let (_tmp, _store, mut fs) = new_store();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let root = fs.root();
        let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        build(&mut fs, &mut rng, src, 0);
        let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
        for step in 0..rng.gen_range(0..25) {
            let side = if rng.gen_bool(0.7) { c } else { src };
            change(&mut fs, &mut rng, side);
            if step % 7 == 3 {
                fs.checkpoint().unwrap();
            }
        }
        for (a, b) in [(src, c), (c, src)] {
            let (got, want) = against_walk(&mut fs, a, b);
            assert_eq!(got, want, "seed {seed}");
        }
        // A tree against itself, and against its untouched snapshot: nothing.
        assert!(fs.diff(src, src, DiffOptions::default()).unwrap().0.is_empty());
    }
}

#[test]
fn one_change_in_a_big_tree_compares_a_few_directories() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let mut deep = 0;
    for d in 0..100 {
        let dir = fs.mknod(src, format!("d{d}").as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        for f in 0..200 {
            let ino = mkfile(&mut fs, dir, &format!("f{f}"), format!("{d}/{f}").as_bytes());
            fs.forget(ino, 1);
        }
        if d == 57 {
            deep = dir;
        }
    }
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    let _ = deep;
    let d57 = lookup(&mut fs, c, "d57").unwrap();
    let f = lookup(&mut fs, d57, "f123").unwrap();
    fs.write(f, 0, b"changed").unwrap();
    let (got, work) = fs.diff(src, c, DiffOptions::default()).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].change, &got[0].path[..]), (Change::Modified, &b"d57/f123"[..]));
    assert!(work.dirs_compared <= 2, "{work:?}");
    assert_eq!(work.files_read, 0);
}

/// A file moved in the clone is a rename (the same object, the same content); moved and
/// changed, or with `no_renames`, it is a deletion and an addition; a file the clone and its
/// source each made after they parted (the same object id, other content) is not a rename.
#[test]
fn moves_are_renames_when_object_and_content_match() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let d = fs.mknod(src, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(&mut fs, d, "a", &vec![7u8; 100_000]);
    mkfile(&mut fs, d, "b", b"small");
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    let cd = lookup(&mut fs, c, "d").unwrap();
    fs.rename(cd, b"a", c, b"a-moved", 0).unwrap();
    fs.rename(cd, b"b", c, b"b-moved", 0).unwrap();
    let bm = lookup(&mut fs, c, "b-moved").unwrap();
    fs.write(bm, 0, b"SMALL").unwrap();
    // Made on each side after the clone: the same next object id, other bytes.
    mkfile(&mut fs, d, "new-in-src", b"one");
    mkfile(&mut fs, c, "new-in-clone", b"two");
    let show = |v: Vec<scion_fs::diff::Difference>| -> Vec<String> {
        v.into_iter()
            .map(|d| match d.old_path {
                Some(o) => format!("R {} {}", String::from_utf8_lossy(&o), String::from_utf8_lossy(&d.path)),
                None => format!("{} {}", d.change.letter(), String::from_utf8_lossy(&d.path)),
            })
            .collect()
    };
    let (got, _) = fs.diff(src, c, DiffOptions::default()).unwrap();
    assert_eq!(
        show(got),
        ["R d/a a-moved", "A b-moved", "D d/b", "D d/new-in-src", "A new-in-clone"]
    );
    let opts = DiffOptions { no_renames: true, ..Default::default() };
    let (got, _) = fs.diff(src, c, opts).unwrap();
    assert_eq!(show(got), ["A a-moved", "A b-moved", "D d/a", "D d/b", "D d/new-in-src", "A new-in-clone"]);
}

/// A diff streams: batches of at most `BATCH` changes, the walk's run in walk order, then the
/// held run (adds, deletes and renames of files) in walk order; the two merged are the whole
/// diff; with renames off nothing is held; an error from the sink ends the walk with it.
#[test]
fn a_diff_streams_in_two_runs_in_walk_order() {
    use scion_fs::diff::{walk_cmp, Merged, Run, BATCH};
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let mut dirs = Vec::new();
    for name in ["a", "a.b", "b"] {
        let d = fs.mknod(src, name.as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        for i in 0..3000 {
            mkfile(&mut fs, d, &format!("f{i}"), format!("{name} {i}").as_bytes());
        }
        dirs.push(name);
    }
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    for name in &dirs {
        let d = lookup(&mut fs, c, name).unwrap();
        for i in (0..3000).step_by(2) {
            let f = lookup(&mut fs, d, &format!("f{i}")).unwrap();
            fs.write(f, 0, b"X").unwrap();
        }
        for i in (1..3000).step_by(10) {
            fs.rename(d, format!("f{i}").as_bytes(), d, format!("g{i}").as_bytes(), 0).unwrap();
        }
        mkfile(&mut fs, d, "new", b"new");
    }
    let ab = lookup(&mut fs, c, "a.b").unwrap();
    fs.unlink(ab, b"f3").unwrap();
    for no_renames in [false, true] {
        let opts = DiffOptions { no_renames, ..Default::default() };
        let (mut walk, mut held, mut runs) = (Vec::new(), Vec::new(), Vec::new());
        fs.diff_each(src, c, opts, None, &mut |run, v| {
            assert!(!v.is_empty() && v.len() <= BATCH, "a batch of {}", v.len());
            if runs.last() != Some(&run) {
                runs.push(run);
            }
            match run {
                Run::Walk => walk.extend(v),
                Run::Held => held.extend(v),
            }
            Ok(())
        })
        .unwrap();
        let want_runs = if no_renames { vec![Run::Walk] } else { vec![Run::Walk, Run::Held] };
        assert_eq!(runs, want_runs);
        for run in [&walk, &held] {
            assert!(run.windows(2).all(|w| walk_cmp(&w[0].path, &w[1].path).is_lt()));
        }
        let renamed = held.iter().filter(|d| d.change == Change::Renamed).count();
        assert_eq!(renamed, if no_renames { 0 } else { 900 });
        assert!(walk.len() > BATCH, "{} changes found by the walk", walk.len());
        let merged: Vec<_> = Merged::new(walk.into_iter(), held.into_iter()).collect();
        let (whole, _) = fs.diff(src, c, opts).unwrap();
        assert_eq!(merged, whole);
        let at = |p: &str| whole.iter().position(|d| d.path == p.as_bytes()).unwrap();
        assert!(at("a/new") < at("a.b/f0") && at("a.b/f0") < at("a.b/f3") && at("a.b/f3") < at("b/f0"));
    }
    let mut calls = 0;
    let r = fs.diff_each(src, c, DiffOptions::default(), None, &mut |_, _| {
        calls += 1;
        Err(scion_fs::FsError::new(libc::EPIPE))
    });
    assert_eq!(r.map(drop).map_err(|e| e.errno()), Err(libc::EPIPE));
    assert_eq!(calls, 1, "the walk went on after its sink failed");
}

/// A diff leaves loaded no more inodes than before, whatever it walked: files on one side
/// only (added, deleted, listed with `recursive`) are unloaded after, as compared ones are.
/// (The first streaming diff kept every added file loaded: 600 bytes each until it ended.)
#[test]
fn a_diff_unloads_what_it_walked() {
    let (_tmp, store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    for i in 0..300 {
        mkfile(&mut fs, src, &format!("f{i}"), format!("{i}").as_bytes());
    }
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    let extra = fs.mknod(c, b"extra", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    for i in 0..300 {
        mkfile(&mut fs, c, &format!("new{i}"), b"new");
        mkfile(&mut fs, extra, &format!("g{i}"), b"g");
        let f = lookup(&mut fs, c, &format!("f{i}")).unwrap();
        fs.write(f, 0, b"X").unwrap();
        fs.forget(f, 1);
    }
    fs.forget(extra, 1);
    fs.checkpoint().unwrap();
    drop(fs);
    // Opened again: nothing loaded but the root.
    let mut fs = open(&store);
    let root = fs.root();
    let (src, c) = (lookup(&mut fs, root, "src").unwrap(), lookup(&mut fs, root, "c").unwrap());
    let before = fs.memory().inodes;
    for recursive in [false, true] {
        let opts = DiffOptions { recursive, ..Default::default() };
        let (got, _) = fs.diff(src, c, opts).unwrap();
        assert_eq!(got.len(), if recursive { 901 } else { 601 });
        let after = fs.memory().inodes;
        assert!(after <= before + 2, "{before} inodes loaded before the diff, {after} after");
    }
}

/// Two directories in different namespaces can have the same tree and still differ below:
/// a hard-linked file's record lives in each namespace's link table, and a nested clone's
/// files in its own namespace. Both are compared, not skipped by the directory's hash.
#[test]
fn hard_links_and_nested_clones_are_compared_across_namespaces() {
    let (_tmp, _store, mut fs) = new_store();
    let (src, c) = clone_with_links_and_nested_changed(&mut fs);
    for (a, b) in [(src, c), (c, src)] {
        let (got, want) = against_walk(&mut fs, a, b);
        assert_eq!(got, want);
        assert_eq!(got.len(), 3, "{got:?}");
    }
}

/// An ordinary user's diff reads what their `diff -r` would: refused where a directory to
/// compare or a file to read is not theirs to read; what both sides share is not looked into.
#[test]
fn a_users_diff_reads_only_what_they_may() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let who = scion_fs::access::Caller { uid: 1000, gid: 1000, groups: vec![] };
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 1000, 1000, 0, &[]).unwrap().ino;
    let open = mkfile(&mut fs, src, "open", b"readable");
    fs.setattr(open, SetAttr { uid: Some(1000), ..Default::default() }).unwrap();
    let private = fs.mknod(src, b"private", Kind::Dir, 0o700, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(&mut fs, private, "secret", b"root's");
    let sealed = mkfile(&mut fs, src, "sealed", b"root's too");
    fs.setattr(sealed, SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    let co = lookup(&mut fs, c, "open").unwrap();
    fs.write(co, 0, b"READABLE").unwrap();
    // Shared below: the private directory and the sealed file are not looked into.
    let (got, _) = fs.diff_as(src, c, DiffOptions::default(), Some(&who)).unwrap();
    assert_eq!(got.iter().map(|d| &d.path[..]).collect::<Vec<_>>(), [&b"open"[..]]);
    // Changed where they may not read: refused, as `diff -r` would fail there.
    let cs = lookup(&mut fs, c, "sealed").unwrap();
    fs.write(cs, 0, b"ROOT'S").unwrap();
    let e = fs.diff_as(src, c, DiffOptions::default(), Some(&who)).unwrap_err();
    assert_eq!(e.errno(), libc::EACCES);
    assert!(e.to_string().contains("sealed"), "{e}");
    fs.write(cs, 0, b"root's").unwrap();
    let cp = lookup(&mut fs, c, "private").unwrap();
    mkfile(&mut fs, cp, "more", b"x");
    let e = fs.diff_as(src, c, DiffOptions::default(), Some(&who)).unwrap_err();
    assert!(e.to_string().contains("private"), "{e}");
    // Root sees it all.
    assert_eq!(fs.diff(src, c, DiffOptions::default()).unwrap().0.len(), 2);
}

/// The same bytes stored differently (a patch laid over a shared block in one tree, the
/// chunk written whole in the other) are equal, for a small (direct) file and a large one.
#[test]
fn equal_bytes_stored_differently_are_equal() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let a = fs.mknod(root, b"a", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let small: Vec<u8> = (0..30_000u32).map(|i| (i % 7) as u8).collect();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 13) as u8).collect();
    let fs_ = mkfile(&mut fs, a, "small", &small);
    let fb = mkfile(&mut fs, a, "big", &big);
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(a, root, b"c", &[], b"/a").unwrap();
    let b = fs.mknod(root, b"b", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let (mut s2, mut b2) = (small.clone(), big.clone());
    s2[100..108].copy_from_slice(b"patched!");
    b2[70_000..70_008].copy_from_slice(b"patched!");
    for (name, data) in [("small", &s2), ("big", &b2)] {
        let f = lookup(&mut fs, c, name).unwrap();
        let at = if name == "small" { 100 } else { 70_000 };
        fs.write(f, at, b"patched!").unwrap(); // a patch over the shared block
        let g = mkfile(&mut fs, b, name, data); // the same bytes, written whole
        let m = fs.getattr(f).unwrap();
        fs.setattr(g, SetAttr { mode: Some(u32::from(m.perm)), ..Default::default() }).unwrap();
    }
    let _ = (fs_, fb);
    fs.checkpoint().unwrap();
    let (got, _) = fs.diff(c, b, DiffOptions::default()).unwrap();
    assert!(got.is_empty(), "{got:?}");
}
