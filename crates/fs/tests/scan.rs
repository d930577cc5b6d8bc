//! `Fs::scan_contents`: every regular file below the roots, keyed by content without reading
//! data. Checked against the files' bytes: equal keys hold equal bytes, and files written
//! alike (the same bytes in one go, in clones, hard links, nested clones) share a key. Also:
//! a clone's unchanged directories are listed without a second walk, and `since` lists only
//! what differs from a snapshot.

mod common;
use common::*;
use rand::{Rng, SeedableRng};
use scion_fs::scan::ScanListing;
use scion_fs::{Fs, Ino, Kind};
use std::collections::HashMap;

fn data(rng: &mut rand::rngs::StdRng, pool: &[Vec<u8>]) -> Vec<u8> {
    if rng.gen_bool(0.4) {
        return pool[rng.gen_range(0..pool.len())].clone();
    }
    let n = match rng.gen_range(0..4) {
        0 => 0,
        1 => rng.gen_range(1..2000),
        2 => rng.gen_range(2000..70_000),
        _ => rng.gen_range(70_000..300_000),
    };
    (0..n).map(|_| rng.gen_range(0..3u8)).collect()
}

fn build(fs: &mut Fs, rng: &mut rand::rngs::StdRng, dir: Ino, depth: u32, pool: &[Vec<u8>]) {
    for i in 0..rng.gen_range(2..7) {
        let name = format!("n{i}");
        match rng.gen_range(0..10) {
            0..=6 => {
                let d = data(rng, pool);
                let f = mkfile(fs, dir, &name, &d);
                if rng.gen_bool(0.15) {
                    fs.link(f, dir, format!("{name}-ln").as_bytes()).unwrap();
                }
            }
            7 => {
                fs.mknod(dir, name.as_bytes(), Kind::Symlink, 0o777, 0, 0, 0, 0, b"n0").unwrap();
            }
            _ if depth < 3 => {
                let d = fs.mknod(dir, name.as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
                build(fs, rng, d, depth + 1, pool);
            }
            _ => {}
        }
    }
}

/// Every regular file below `dir` by a walk through lookups, with its bytes.
fn files(fs: &mut Fs, dir: Ino, path: &str, out: &mut Vec<(String, Vec<u8>)>) {
    for e in fs.readdir(dir).unwrap() {
        if e.name == b".snapshot" {
            continue;
        }
        let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
        let a = fs.lookup(dir, &e.name).unwrap();
        match a.kind {
            Kind::File => out.push((p, read_all(fs, a.ino))),
            Kind::Dir => files(fs, a.ino, &p, out),
            _ => {}
        }
        fs.forget(a.ino, 1);
    }
}

fn by_path(l: &ScanListing) -> HashMap<String, [u8; 32]> {
    l.files
        .iter()
        .map(|(p, k)| (format!("/{}", String::from_utf8_lossy(p)), l.contents[*k as usize].0))
        .collect()
}

/// Checks a listing against the bytes: the same paths, equal keys for equal bytes and only
/// for them, and the sizes right.
fn check(l: &ScanListing, want: &[(String, Vec<u8>)]) {
    let got = by_path(l);
    assert_eq!(got.len(), want.len(), "paths listed");
    assert_eq!(l.files.len(), want.len(), "no path twice");
    let mut key_of_bytes: HashMap<&[u8], [u8; 32]> = HashMap::new();
    let mut bytes_of_key: HashMap<[u8; 32], &[u8]> = HashMap::new();
    for (p, b) in want {
        let k = *got.get(p).unwrap_or_else(|| panic!("{p} not listed"));
        assert!(*bytes_of_key.entry(k).or_insert(b) == &b[..], "{p}: one key, two contents");
        assert_eq!(*key_of_bytes.entry(b).or_insert(k), k, "{p}: one content, two keys");
    }
    for (k, size) in &l.contents {
        assert_eq!(bytes_of_key[k].len() as u64, *size);
    }
}

#[test]
fn keys_name_contents_across_clones_and_changes() {
    for seed in 0..8u64 {
        let (_tmp, _store, mut fs) = new_store();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let pool: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8 + 1; 1000 + 40_000 * i]).collect();
        let root = fs.root();
        let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        build(&mut fs, &mut rng, src, 0, &pool);
        if seed % 2 == 0 {
            fs.checkpoint().unwrap();
        }
        let c1 = fs.clone_dir(src, root, b"c1", &[], b"/src").unwrap();
        let c2 = fs.clone_dir(src, root, b"c2", &[], b"/src").unwrap();
        // Changes in one clone, some left uncheckpointed: a new file, a rewrite.
        let d = data(&mut rng, &pool);
        mkfile(&mut fs, c1, "added", &d);
        let mut all = Vec::new();
        files(&mut fs, c1, "", &mut all);
        if let Some((p, _)) = all.iter().find(|(_, b)| !b.is_empty()) {
            let f = walk(&mut fs, c1, p);
            fs.write(f, 3, b"changed").unwrap();
            fs.forget(f, 1);
        }
        let roots = vec![(src, b"src".to_vec(), None), (c1, b"c1".to_vec(), None), (c2, b"c2".to_vec(), None)];
        let got = fs.scan_contents(&roots, None).unwrap();
        let mut want = Vec::new();
        for (ino, name) in [(src, "/src"), (c1, "/c1"), (c2, "/c2")] {
            files(&mut fs, ino, name, &mut want);
        }
        check(&got, &want);
    }
}

fn walk(fs: &mut Fs, dir: Ino, path: &str) -> Ino {
    let mut at = dir;
    for n in path.split('/').filter(|n| !n.is_empty()) {
        let next = lookup(fs, at, n).unwrap();
        if at != dir {
            fs.forget(at, 1);
        }
        at = next;
    }
    at
}

/// A hard-linked file changed in a clone, and a nested clone's file: the directories above
/// them have the same tree in both namespaces, and must not be listed from the first walk.
#[test]
fn hard_links_and_nested_clones_are_keyed_per_namespace() {
    let (_tmp, _store, mut fs) = new_store();
    let (src, c) = clone_with_links_and_nested_changed(&mut fs);
    let got = fs.scan_contents(&[(src, b"src".to_vec(), None), (c, b"c".to_vec(), None)], None).unwrap();
    let mut want = Vec::new();
    files(&mut fs, src, "/src", &mut want);
    files(&mut fs, c, "/c", &mut want);
    check(&got, &want);
}

/// Eight clones of one tree list every file of each, from one walk of the tree's
/// directories: the contents are those of one tree.
#[test]
fn clones_share_the_walk() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    for d in 0..20 {
        let dir = fs.mknod(src, format!("d{d}").as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        for f in 0..50 {
            let ino = mkfile(&mut fs, dir, &format!("f{f}"), format!("{d}/{f}").repeat(40).as_bytes());
            fs.forget(ino, 1);
        }
    }
    fs.checkpoint().unwrap();
    let mut roots = vec![(src, b"src".to_vec(), None)];
    for i in 0..8 {
        let name = format!("c{i}");
        let c = fs.clone_dir(src, root, name.as_bytes(), &[], b"/src").unwrap();
        roots.push((c, name.into_bytes(), None));
    }
    let got = fs.scan_contents(&roots, None).unwrap();
    assert_eq!(got.files.len(), 9 * 1000);
    assert_eq!(got.contents.len(), 1000);
    assert!(got.files.iter().any(|(p, _)| p == b"c7/d19/f49"));
}

#[test]
fn since_lists_what_differs_from_a_snapshot() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let d = fs.mknod(src, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    for f in 0..10 {
        mkfile(&mut fs, d, &format!("f{f}"), format!("file {f}").as_bytes());
    }
    mkfile(&mut fs, src, "gone", b"bye");
    fs.snapshot(src, b"before", b"/src").unwrap();
    let f3 = lookup(&mut fs, d, "f3").unwrap();
    fs.write(f3, 0, b"FILE").unwrap();
    let f4 = lookup(&mut fs, d, "f4").unwrap();
    fs.setattr(f4, scion_fs::SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    mkfile(&mut fs, d, "new", b"new file");
    fs.unlink(src, b"gone").unwrap();
    let snap = walk(&mut fs, src, ".snapshot/before");
    let got = fs.scan_contents(&[(src, b"src".to_vec(), Some(snap))], None).unwrap();
    let mut paths: Vec<String> = got.files.iter().map(|(p, _)| String::from_utf8_lossy(p).into_owned()).collect();
    paths.sort();
    assert_eq!(paths, ["src/d/f3", "src/d/new"]);
}

/// For an ordinary user, directories they may not read and search are not walked but
/// listed as denied, in every clone that holds them.
#[test]
fn a_user_scans_what_they_may_list() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 1000, 1000, 0, &[]).unwrap().ino;
    mkfile(&mut fs, src, "open", b"readable");
    let private = fs.mknod(src, b"private", Kind::Dir, 0o700, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(&mut fs, private, "secret", b"root's");
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    let who = scion_fs::access::Caller { uid: 1000, gid: 1000, groups: vec![] };
    let got = fs.scan_contents(&[(src, b"src".to_vec(), None), (c, b"c".to_vec(), None)], Some(&who)).unwrap();
    let paths: Vec<&[u8]> = got.files.iter().map(|(p, _)| &p[..]).collect();
    assert_eq!(paths, [&b"src/open"[..], b"c/open"]);
    assert_eq!(got.denied, [b"src/private".to_vec(), b"c/private".to_vec()]);
    let got = fs.scan_contents(&[(src, b"src".to_vec(), None)], None).unwrap();
    assert_eq!(got.files.len(), 2);
}

/// A file still looked up (as the kernel holds it) and changed after a checkpoint: the scan
/// sees the change.
#[test]
fn a_loaded_file_changed_since_the_last_checkpoint() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let d = fs.mknod(src, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    let f = mkfile(&mut fs, d, "f", &vec![5u8; 90_000]);
    fs.forget(f, 1);
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(src, root, b"c", &[], b"/src").unwrap();
    fs.checkpoint().unwrap();
    let cd = lookup(&mut fs, c, "d").unwrap();
    let cf = lookup(&mut fs, cd, "f").unwrap();
    fs.write(cf, 0, b"changed").unwrap();
    let got = fs.scan_contents(&[(src, b"src".to_vec(), None), (c, b"c".to_vec(), None)], None).unwrap();
    let mut want = Vec::new();
    files(&mut fs, src, "/src", &mut want);
    files(&mut fs, c, "/c", &mut want);
    check(&got, &want);
}

/// For an ordinary user, a file they may not read is listed as denied, with no key and no
/// size: whether another user's private file equals a guess of theirs is not told (small
/// files are keyed by a hash of their bytes, which could be brute-forced offline). A
/// directory listed again from its first walk lists the refusal again.
#[test]
fn a_user_gets_no_key_of_a_file_they_may_not_read() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let bob = fs.mknod(root, b"bob", Kind::Dir, 0o755, 0, 2000, 2000, 0, &[]).unwrap().ino;
    let p = mkfile(&mut fs, bob, "private.txt", b"pin 4711");
    fs.setattr(p, scion_fs::SetAttr { mode: Some(0o600), uid: Some(2000), ..Default::default() }).unwrap();
    mkfile(&mut fs, bob, "public.txt", b"hello");
    let mallory = fs.mknod(root, b"mallory", Kind::Dir, 0o755, 0, 1000, 1000, 0, &[]).unwrap().ino;
    let g = mkfile(&mut fs, mallory, "guess", b"pin 4711");
    fs.setattr(g, scion_fs::SetAttr { uid: Some(1000), ..Default::default() }).unwrap();
    let c = fs.clone_dir(bob, root, b"c", &[], b"/bob").unwrap();
    let who = scion_fs::access::Caller { uid: 1000, gid: 1000, groups: vec![] };
    let roots = [(bob, b"bob".to_vec(), None), (mallory, b"mallory".to_vec(), None), (c, b"c".to_vec(), None)];
    let got = fs.scan_contents(&roots, Some(&who)).unwrap();
    let mut paths: Vec<&[u8]> = got.files.iter().map(|(p, _)| &p[..]).collect();
    paths.sort();
    assert_eq!(paths, [&b"bob/public.txt"[..], b"c/public.txt", b"mallory/guess"]);
    let mut denied = got.denied.clone();
    denied.sort();
    assert_eq!(denied, [b"bob/private.txt".to_vec(), b"c/private.txt".to_vec()]);
    assert_eq!(got.contents.len(), 2, "the guess's key is its own, matched by nothing");
    // Root keys it, and the guess matches.
    let got = fs.scan_contents(&roots, None).unwrap();
    assert_eq!(got.contents.len(), 2, "private.txt and guess share a key for root");
    assert!(got.denied.is_empty());
}

/// A scan's pin (a snapshot named `.scion-...`) is reachable by its name under `.snapshot`
/// but is no version of its directory: versions, retention and mirrors do not see it.
#[test]
fn a_transient_snapshot_is_reachable_but_no_version() {
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let d = fs.mknod(root, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    mkfile(&mut fs, d, "f", b"pinned");
    fs.snapshot(d, b"kept", b"/d").unwrap();
    fs.snapshot(d, b".scion-scan-00ff", b"/d").unwrap();
    let names: Vec<Vec<u8>> = fs.dir_snapshots(d).unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, [b"kept".to_vec()]);
    let f = fs.resolve_path(b"d/.snapshot/.scion-scan-00ff/f").unwrap();
    assert_eq!(read_all(&mut fs, f), b"pinned");
    let v = fs.versions(b"d/f").unwrap();
    assert!(v.iter().all(|x| x.snapshots.iter().all(|s| !s.windows(7).any(|w| w == b".scion-"))), "{v:?}");
}

/// The same tree at two places, open at one and closed at the other (a directory's mode is
/// its parent's record, not its tree's): a user's scan lists it where they may list it
/// only, whichever it walks first.
#[test]
fn a_tree_walked_once_is_listed_again_only_where_the_user_may_list_it() {
    let who = scion_fs::access::Caller { uid: 1000, gid: 1000, groups: vec![] };
    for closed_first in [true, false] {
        let (_tmp, _store, mut fs) = new_store();
        let root = fs.root();
        let top = fs.mknod(root, b"top", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        let a = fs.mknod(top, b"a", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        mkfile(&mut fs, a, "f", b"same bytes, same tree");
        let b = fs.mknod(top, b"b", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        mkfile(&mut fs, b, "f", b"same bytes, same tree");
        let closed = if closed_first { a } else { b };
        fs.setattr(closed, scion_fs::SetAttr { mode: Some(0o700), ..Default::default() }).unwrap();
        fs.checkpoint().unwrap();
        let got = fs.scan_contents(&[(top, b"top".to_vec(), None)], Some(&who)).unwrap();
        let paths: Vec<&[u8]> = got.files.iter().map(|(p, _)| &p[..]).collect();
        let (open, shut) = if closed_first { ("top/b/f", "top/a") } else { ("top/a/f", "top/b") };
        assert_eq!(paths, [open.as_bytes()], "closed first: {closed_first}");
        assert_eq!(got.denied, [shut.as_bytes().to_vec()], "closed first: {closed_first}");
    }
}

/// A scan streams: 10,000 files and a clone of them reach the sink in batches of at most
/// `BATCH_FILES`, each file's content announced in its batch or before, in walk order (the
/// paths sorted with `/` below every other byte: `a/z` before `a.b`); the batches make
/// the listing `scan_contents` gives; a sink's error ends the walk with it.
#[test]
fn a_scan_streams_in_batches_in_walk_order() {
    use scion_fs::scan::{ScanBatch, BATCH_FILES};
    let (_tmp, _store, mut fs) = new_store();
    let root = fs.root();
    let src = fs.mknod(root, b"src", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
    for d in ["a", "a.b", "a-c", "b"] {
        let dir = fs.mknod(src, d.as_bytes(), Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        for f in 0..2500 {
            mkfile(&mut fs, dir, &format!("f{f}"), format!("{}", f % 300).as_bytes());
        }
        mkfile(&mut fs, src, &format!("{d}0"), d.as_bytes());
    }
    fs.checkpoint().unwrap();
    let c = fs.clone_dir(src, root, b"c", &[], b"test").unwrap();
    let roots = [(src, b"src".to_vec(), None), (c, b"c".to_vec(), None)];
    let mut batches: Vec<ScanBatch> = Vec::new();
    fs.scan_each(&roots, None, &mut |b| {
        batches.push(b);
        Ok(())
    })
    .unwrap();
    assert!(batches.len() >= 2 * 10_004 / BATCH_FILES, "{} batches", batches.len());
    let mut announced = 0;
    let mut paths = Vec::new();
    for b in &batches {
        assert!(b.files.len() + b.denied.len() <= BATCH_FILES);
        announced += b.contents.len();
        assert!(b.files.iter().all(|(_, k)| (*k as usize) < announced), "a file before its content");
        paths.extend(b.files.iter().map(|(p, _)| p.clone()));
    }
    assert_eq!(paths.len(), 2 * 10_004);
    let mut sorted = paths.clone();
    // (Root by root, in the order given.)
    sorted.sort_by_key(|p| (!p.starts_with(b"src/"), p.split(|&c| c == b'/').map(<[u8]>::to_vec).collect::<Vec<_>>()));
    if let Some(i) = (0..paths.len()).find(|&i| paths[i] != sorted[i]) {
        let show = |v: &[Vec<u8>]| v.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect::<Vec<_>>();
        panic!("not in walk order at {i}: {:?}, sorted {:?}", show(&paths[i.saturating_sub(2)..i + 2]), show(&sorted[i.saturating_sub(2)..i + 2]));
    }
    assert!(paths.iter().position(|p| p == b"src/a/f999").unwrap() < paths.iter().position(|p| p == b"src/a.b/f0").unwrap());
    let all = fs.scan_contents(&roots, None).unwrap();
    assert_eq!(all.files.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(), paths);
    assert_eq!(all.contents.len(), announced);
    // A sink that fails stops the walk, with its error.
    let mut calls = 0;
    let r = fs.scan_each(&roots, None, &mut |_| {
        calls += 1;
        Err(scion_fs::errno::EPERM)
    });
    assert_eq!((r.unwrap_err(), calls), (scion_fs::errno::EPERM, 1));
}
