//! `versions` and `deleted` on random histories, against a model that remembers what each
//! snapshot saw: a file rewritten, left alone, removed and made again between snapshots of
//! its directory and of the directory above; the versions must be exactly the distinct
//! states the snapshots (and the live tree) hold, each naming the snapshots that hold it,
//! and the bytes read through each version's first snapshot must be that state's.

mod common;
use common::*;
use rand::{Rng, SeedableRng};
use scion_fs::Kind;
use std::collections::BTreeMap;

#[test]
fn versions_of_random_histories_match_the_model() {
    for seed in 0..12u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (_tmp, _dir, mut fs) = new_store();
        let root = fs.root();
        let top = fs.mknod(root, b"top", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        let d = fs.mknod(top, b"d", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap().ino;
        // The file's state: which generation, and its bytes (None: absent).
        let mut generation = 0u32;
        let mut bytes: Option<Vec<u8>> = None;
        // What each snapshot saw: snapshot path -> (generation, bytes).
        let mut seen: Vec<(Vec<u8>, Option<(u32, Vec<u8>)>)> = Vec::new();
        for step in 0..rng.gen_range(3..14) {
            match rng.gen_range(0..4) {
                0 | 1 => {
                    let len = rng.gen_range(0..200_000);
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    let f = match lookup(&mut fs, d, "f") {
                        Ok(f) => f,
                        Err(_) => fs.mknod(d, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino,
                    };
                    fs.setattr(
                        f,
                        scion_fs::SetAttr {
                            size: Some(0),
                            ..Default::default()
                        },
                    )
                    .unwrap();
                    fs.write(f, 0, &data).unwrap();
                    generation += 1;
                    bytes = Some(data);
                }
                2 if bytes.is_some() => {
                    fs.unlink(d, b"f").unwrap();
                    bytes = None;
                }
                _ => {} // left alone
            }
            // Snapshot the file's directory or the one above it.
            let (dir, path) = if rng.gen_bool(0.5) { (d, "top/d") } else { (top, "top") };
            let name = format!("s{step}");
            fs.snapshot(dir, name.as_bytes(), b"test").unwrap();
            let snap = format!("{path}/.snapshot/{name}").into_bytes();
            seen.push((snap, bytes.clone().map(|b| (generation, b))));
            if rng.gen_bool(0.3) {
                fs.checkpoint().unwrap();
            }
        }
        // The model's versions: generations held by snapshots (in order of first holder),
        // then the live one.
        let mut model: BTreeMap<u32, (Vec<Vec<u8>>, bool)> = BTreeMap::new();
        let mut order = Vec::new();
        for (snap, state) in &seen {
            if let Some((g, _)) = state {
                if !model.contains_key(g) {
                    order.push(*g);
                }
                model.entry(*g).or_default().0.push(snap.clone());
            }
        }
        if bytes.is_some() {
            if !model.contains_key(&generation) {
                order.push(generation);
            }
            model.entry(generation).or_default().1 = true;
        }
        let got = fs.versions(b"top/d/f");
        if order.is_empty() {
            assert_eq!(got.err(), Some(scion_fs::errno::ENOENT), "seed {seed}");
            continue;
        }
        let got = got.unwrap();
        assert_eq!(got.len(), order.len(), "seed {seed}: {got:?}");
        for (v, g) in got.iter().zip(&order) {
            let (snaps, live) = &model[g];
            let mut want = snaps.clone();
            want.sort();
            let mut have: Vec<Vec<u8>> = v
                .snapshots
                .iter()
                .map(|s| {
                    // Paths from the mount root: "top/d/.snapshot/s3" or "top/.snapshot/s3".
                    s.clone()
                })
                .collect();
            have.sort();
            assert_eq!(have, want, "seed {seed}: generation {g}");
            assert_eq!(v.live, *live, "seed {seed}: generation {g}");
            // The bytes through the version's first snapshot.
            let state = seen
                .iter()
                .find(|(s, _)| Some(s) == v.snapshots.first())
                .map(|x| x.1.clone());
            if let Some(Some((_, want_bytes))) = state {
                let snap = v.snapshots[0].clone();
                let inside = if snap.starts_with(b"top/d/") {
                    b"/f".to_vec()
                } else {
                    b"/d/f".to_vec()
                };
                let ino = fs.resolve_path(&[snap, inside].concat()).unwrap();
                assert_eq!(read_all(&mut fs, ino), want_bytes, "seed {seed}: generation {g}");
                assert_eq!(v.size, want_bytes.len() as u64);
            }
        }
        // Deleted: what a snapshot of d holds that d does not.
        let del = fs.deleted(b"top/d").unwrap();
        let any_held = seen.iter().any(|(_, s)| s.is_some());
        assert_eq!(
            del.len(),
            usize::from(bytes.is_none() && any_held),
            "seed {seed}: {del:?}"
        );
        if let Some(x) = del.first() {
            assert_eq!(x.path, b"f");
            let newest = seen.iter().rev().find(|(_, s)| s.is_some()).unwrap();
            assert_eq!(x.snapshot, newest.0, "seed {seed}: the newest snapshot holding it");
        }
    }
}
