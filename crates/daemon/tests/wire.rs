//! The control protocol: every operation and every reply round-trips through its encoding,
//! every cut-short message is refused (never a panic), and an older scion's messages are
//! recognised as such.

use scion_daemon::control::{Failure, Op, Reply, ScanCounts, SendDedup, Target};
use scion_daemon::scan_cache::ScanResult;
use scion_daemon::wire::{self, Frame, Part};
use scion_fs::repack::RepackReport;
use scion_fs::schedule::retention::{Keep, Thresholds};
use scion_fs::schedule::{Schedule, ScheduleRow};
use scion_fs::scrub::ScrubReport;
use scion_fs::versions::{Deleted, Version};
use scion_fs::{Kind, Listing, NsKind, Ts};

fn ops() -> Vec<Op> {
    vec![
        Op::Send { snap: b"a/.snapshot/s".to_vec(), base: None, resume: None, dedup: SendDedup::Off },
        Op::Send { snap: b"a/.snapshot/s".to_vec(), base: Some(b"b".to_vec()), resume: Some((7, [3; 32])), dedup: SendDedup::Offer },
        Op::Send { snap: b"s".to_vec(), base: None, resume: None, dedup: SendDedup::Use(vec![[1; 32], [2; 32]]) },
        Op::FindBlocks { hashes: vec![[9; 32]; 3] },
        Op::Push { snap: b"img/.snapshot/gold".to_vec(), remote: "bases".into(), name: "debian-12".into() },
        Op::PullOpen { remote: "bases".into(), name: "debian-12".into(), version: None, tmp: b".d.scion-receive-9".to_vec(), pid: 9 },
        Op::PullOpen { remote: "bases".into(), name: "debian-12".into(), version: Some(7), tmp: b"x/.d.scion-receive-9".to_vec(), pid: 1 },
        Op::PullDone { tmp: b"x/.d.scion-receive-9".to_vec() },
        Op::Prefetch { attach: 1 << 23 },
        Op::RemoteGc { remote: "bases".into(), grace_s: 86400, dry: true },
        Op::Apply { top: b".x.scion-receive-9".to_vec(), base: None, open: None, frames: vec![1, 2, 3], attach: Some((1 << 23) + 5) },
        Op::Apply { top: b".x.scion-receive-9".to_vec(), base: Some(b"b".to_vec()), open: Some(vec![4]), frames: vec![], attach: None },
        Op::Checkpoint { path: b"x/.y.scion-receive-7".to_vec() },
        Op::OpenBelow { path: b"ci/src".to_vec() },
        Op::OpenBelow { path: Vec::new() },
        Op::ReadOnly { on: true },
        Op::ReadOnly { on: false },
        Op::Nfs(scion_daemon::control::NfsRequest::Stop),
        Op::Nfs(scion_daemon::control::NfsRequest::Start(scion_daemon::control::NfsSpec {
            listen: "127.0.0.1:2049".into(),
            exports: vec![b"vm1".to_vec(), b"srv/vm2".to_vec()],
            read_only: vec![b"vm1/golden".to_vec()],
            squash: "all".into(),
            anon_uid: 65534,
            anon_gid: 100,
            max_held: 4096,
        })),
        Op::Clone {
            src: b"a/b".to_vec(),
            dst: b"c".to_vec(),
            excludes: vec![vec![b"x".to_vec(), b"y".to_vec()], vec![b"z".to_vec()]],
        },
        Op::Snapshot {
            path: b"d".to_vec(),
            name: b"2026-11-25T173000Z".to_vec(),
        },
        Op::Destroy { target: Target::Path(b"d/.snapshot/s".to_vec()), recursive: false },
        Op::Destroy { target: Target::Id(42), recursive: false },
        Op::List { under: None },
        Op::List {
            under: Some(b"sub".to_vec()),
        },
        Op::Scrub,
        Op::Compress { budget: 1 << 30, level: 19 },
        Op::MirrorSet {
            dir: b"home/ann".to_vec(),
            target: b"/mnt/backup/ann".to_vec(),
            keep_unmirrored: true,
        },
        Op::MirrorRemove {
            dir: b"home/ann".to_vec(),
            target: None,
        },
        Op::MirrorRemove {
            dir: Vec::new(),
            target: Some(b"/b".to_vec()),
        },
        Op::MirrorStatus,
        Op::RemoteAdd(scion_fs::records::remotes::Remote::parse("minio", "s3://bases/ci", "http://127.0.0.1:9000", "us-east-1").unwrap()),
        Op::RemoteRemove { name: "minio".into() },
        Op::RemoteList,
        Op::Status,
        Op::CubeCreate {
            path: b"srv/db".to_vec(),
            mode: "nofsync".into(),
            on_error: "fence".into(),
        },
        Op::CubeSet {
            path: b"srv/db".to_vec(),
            mode: String::new(),
            on_error: "readonly".into(),
        },
        Op::CubeList,
        Op::CubeRecover { path: b"srv/db".to_vec() },
        Op::CubeCheck { path: b"srv/db".to_vec() },
        Op::CubeRemove { path: b"srv/db".to_vec() },
        Op::Repack {
            path: b"r".to_vec(),
            budget: 1 << 30,
        },
        Op::ScheduleSet(schedule()),
        Op::ScheduleRemove {
            dir: b"home/ann".to_vec(),
        },
        Op::ScheduleList,
        Op::Versions {
            path: b"top/d/f".to_vec(),
        },
        Op::Deleted { dir: b"top/d".to_vec() },
        Op::Restore {
            path: b"top/d/f".to_vec(),
            from: b"s1".to_vec(),
            to: Some(b"top/d/f.old".to_vec()),
            replace: true,
        },
        Op::Restore {
            path: b"top".to_vec(),
            from: b"top/.snapshot/s1".to_vec(),
            to: None,
            replace: false,
        },
        Op::Rollback {
            dir: b"sandbox".to_vec(),
            to: b"2026-11-24T201502Z".to_vec(),
        },
        Op::Diff {
            a: b"a".to_vec(),
            b: b"b/.snapshot/s".to_vec(),
            times: true,
            recursive: false,
            no_renames: true,
        },
        Op::Scan {
            paths: vec![b"srv/vm1".to_vec(), b"srv/vm2".to_vec()],
            since: Some(b"nightly".to_vec()),
            command: Some(b"clamscan\0{}\0".to_vec()),
        },
        Op::Scan {
            paths: vec![Vec::new()],
            since: None,
            command: None,
        },
        Op::ScanRecord {
            command: b"sha256sum\0".to_vec(),
            results: vec![scan_result(1, 0), scan_result(2, 137)],
        },
        Op::Diff {
            a: b"src".to_vec(),
            b: b"c/.snapshot/s".to_vec(),
            times: false,
            recursive: true,
            no_renames: true,
        },
    ]
}

fn schedule() -> Schedule {
    Schedule {
        dir: b"home/ann/my files".to_vec(),
        every: 900,
        keep: Keep::parse("last=5,daily=7").unwrap(),
        limits: Thresholds {
            keep_while_free: Some(20),
            min_free: None,
        },
    }
}

#[test]
fn requests_round_trip_and_cut_ones_are_refused() {
    for (op, device) in ops().into_iter().zip(["", "0:53"].into_iter().cycle()) {
        let settle = !scion_daemon::control::settle_dirs(&op).is_empty();
        for settled in [false, true] {
            if settled && !settle {
                continue;
            }
            let b = if settled { wire::encode_settled_request(&op, device) } else { wire::encode_request(&op, device) };
            let req = wire::Request { op: op.clone(), device: device.to_string(), settled };
            assert_eq!(wire::decode_request(&b), Ok(req));
            for cut in 0..b.len() {
                assert!(wire::decode_request(&b[..cut]).is_err(), "{op:?} cut at {cut}");
            }
            let mut long = b.clone();
            long.push(0);
            assert!(wire::decode_request(&long).is_err(), "trailing bytes");
        }
    }
    // Settled only where the operation reads directories, and only once.
    let plain = wire::encode_request(&Op::Scrub, "");
    let mut settled_scrub = plain.clone();
    settled_scrub.insert(plain.len() - 1, 49);
    let e = wire::decode_request(&settled_scrub).unwrap_err();
    assert!(e.contains("cannot be asked settled"), "{e}");
    let clone = Op::Clone { src: b"a".to_vec(), dst: b"b".to_vec(), excludes: Vec::new() };
    let once = wire::encode_settled_request(&clone, "");
    let mut twice = once.clone();
    twice.insert(once.len() - 1 - (4 + 1) - (4 + 1) - 4 - 1, 49);
    assert!(wire::decode_request(&twice).is_err(), "settled twice");
    let mut v1 = wire::encode_request(&Op::Scrub, "");
    v1[4] = 1;
    let e = wire::decode_request(&v1).unwrap_err();
    assert!(e.contains("version 1"), "{e}");
}

#[test]
fn replies_round_trip_and_cut_ones_are_refused() {
    let listing = Listing {
        ns: 3,
        kind: NsKind::Snapshot,
        path: Some(b"d".to_vec()),
        origin: b"/d".to_vec(),
        created: Ts {
            sec: 1_764_000_000,
            nsec: 5,
        },
        referenced: 1 << 20,
        exclusive: 4096,
        stored: 12288,
        scheduled: true,
        orphaned: false,
    };
    let orphan = Listing {
        path: Some(b".snapshot/@3".to_vec()),
        orphaned: true,
        ..listing.clone()
    };
    let scrub = ScrubReport {
        blocks: 100,
        bytes: 1 << 20,
        damage: vec![("/victim".into(), "hash mismatch".into())],
        damaged_total: 1,
    };
    let repack = RepackReport {
        files: 10,
        moved_files: 7,
        moved_bytes: 1 << 20,
        budget_reached: true,
        ..Default::default()
    };
    let frames = vec![
        wire::encode_reply(&Reply::Cloned),
        wire::encode_reply(&Reply::Blocks(vec![true, false, true])),
        wire::encode_reply(&Reply::Checkpointed),
        wire::encode_reply(&Reply::OpenBelow(vec![b"a".to_vec(), b"sub/b c".to_vec()])),
        wire::encode_reply(&Reply::OpenBelow(Vec::new())),
        wire::encode_reply(&Reply::Nfs("NFSv3 on 127.0.0.1:2049: exports /".into())),
        wire::encode_reply(&Reply::Listing(vec![listing.clone(), listing, orphan])),
        wire::encode_reply(&Reply::Scrubbed(scrub)),
        wire::encode_reply(&Reply::Repacked(repack)),
        wire::encode_reply(&Reply::MirrorSet),
        wire::encode_reply(&Reply::Cube(cube_row())),
        wire::encode_reply(&Reply::Cubes(vec![cube_row(), cube_row()])),
        wire::encode_reply(&Reply::Checked(Box::new(scion_fs::check::Report {
            generation: 9,
            files: 3,
            relocated_bytes: 4096,
            unnamed_tail_bytes: 7,
            journal_tail: Some("torn record at 4096".into()),
            leftovers: vec!["a restore --replace left /d/.x.scion-restore-t".into()],
            unreferenced_bytes: 17 << 20,
            problems: vec!["block 7: hash mismatch".into(), "refcount of 9: 2, counted 1".into()],
            ..Default::default()
        }))),
        wire::encode_reply(&Reply::Status(Box::new(scion_daemon::control::Status {
            facts: scion_fs::status::StatusFacts {
                generation: 7,
                checkpoint_age_s: 3,
                journal_bytes: 4096,
                dirty_bytes: 1,
                unpunched_blocks: 2,
                compressed_blocks: 5,
                compressed_bytes: 8192,
                pack_bytes: 1 << 30,
                repack_age_s: Some(60),
                compress_age_s: None,
                schedules: 2,
                mirrors: 1,
                failed: Some("a checkpoint failed".into()),
                host_full: true,
                written: scion_fs::status::Written { user: 1 << 30, data: 1 << 30, journal: 12345, meta: 678, repack: 9, compress: 10 },
                memory: scion_fs::status::Memory {
                    inodes: 100_001,
                    kernel_inodes: 100_000,
                    inode_bytes: 70 << 20,
                    node_cache_bytes: 63 << 20,
                    node_cache_limit: 64 << 20,
                    hash_memo_entries: 12,
                    hash_memo_limit: 1 << 20,
                    whereabouts_entries: 77,
                    whereabouts_limit: 1 << 15,
                },
                lock: scion_fs::LockReport {
                    holds: 1000,
                    held: [990, 5, 3, 1, 1],
                    waited: [995, 3, 1, 1, 0],
                    longest_wait_us: 61_000,
                    longest: vec![
                        scion_fs::LongHold { us: 300_000, at: "crates/daemon/src/engine.rs:228".into(), ended_s: 40 },
                        scion_fs::LongHold { us: 70_000, at: "crates/fuse/src/lib.rs:512".into(), ended_s: 3 },
                    ],
                },
            },
            store: b"/srv/store".to_vec(),
            pid: 4242,
            uptime_s: 99,
            host_total: 1 << 40,
            host_free: 1 << 39,
            clones: 3,
            snapshots: 12,
            snapshots_only: 1 << 20,
            mirrors_failing: 1,
            orphaned: 2,
            orphaned_bytes: 8192,
            rss_bytes: 150 << 20,
            listings: 3,
            listing_bytes: 4096,
            nfs: "NFSv3 on 127.0.0.1:2049: exports /vm1".into(),
            remote: Some(scion_daemon::control::RemoteStatus {
                fetches: 3,
                fetched_bytes: 1 << 20,
                failures: 1,
                failing: "remote bases: no answer within 30s".into(),
                failing_since: 1_700_000_000,
                cache_bytes: 4096,
                cache_limit: 1 << 30,
            }),
        }))),
        wire::encode_reply(&Reply::Pushed(scion_daemon::control::PushSummary {
            version: 2,
            root: [1; 32],
            tree: [2; 32],
            stats: scion_remote::push::PushStats { blocks: 10, new_blocks: 3, new_bytes: 3 << 16, sent_bytes: 200_000, objects: 4, known_packs: 1, done_bytes: 1 << 20 },
        })),
        wire::encode_reply(&Reply::PullOpened { attach: 1 << 23, version: 2, root: [5; 32], blocks: 10 }),
        wire::encode_reply(&Reply::Prefetched(1 << 20)),
        wire::encode_reply(&Reply::PullDone),
        wire::encode_reply(&Reply::RemoteGc(scion_remote::gc::GcReport { manifests: 2, trees: 3, packs: 4, removed: 2, removed_bytes: 9 << 20, young: 1, pushes: 0 })),
        wire::encode_reply(&Reply::MirrorRemoved(2)),
        wire::encode_reply(&Reply::RemoteAdded),
        wire::encode_reply(&Reply::RemoteRemoved),
        wire::encode_reply(&Reply::Remotes(vec![
            scion_fs::records::remotes::Remote::parse("minio", "s3://bases/ci", "http://127.0.0.1:9000", "us-east-1").unwrap(),
            scion_fs::records::remotes::Remote::parse("aws", "s3://team", "", "").unwrap(),
        ])),
        wire::encode_reply(&Reply::Mirrors(vec![scion_daemon::control::MirrorRow {
            mirror: scion_fs::records::mirrors::Mirror {
                dir: b"home/ann".to_vec(),
                target: b"/mnt/backup/ann".to_vec(),
                keep_unmirrored: false,
                last: Some(b"2026-11-24T201502Z".to_vec()),
                last_time: 1_795_551_302,
            },
            next: Some(b"2026-11-24T203002Z".to_vec()),
            behind: 3,
            state: "sending 2026-11-24T203002Z (an increment)".into(),
        }])),
        wire::encode_reply(&Reply::Compressed(scion_fs::compress::CompressReport {
            candidates: 9,
            compressed: 5,
            bytes_before: 5 << 16,
            bytes_after: 3 << 12,
            incompressible: 2,
            left: 2,
        })),
        wire::encode_reply(&Reply::ScheduleSet),
        wire::encode_reply(&Reply::ScheduleRemoved(true)),
        wire::encode_reply(&Reply::Schedules(vec![
            ScheduleRow {
                schedule: schedule(),
                last_run: Some(1_795_551_302),
                next_run: Some(1_795_552_202),
                kept: 12,
            },
            ScheduleRow {
                schedule: Schedule {
                    dir: Vec::new(),
                    ..schedule()
                },
                last_run: None,
                next_run: None,
                kept: 0,
            },
        ])),
        wire::encode_reply(&Reply::Versions(vec![
            Version {
                snapshots: vec![b"top/.snapshot/b".to_vec(), b"top/d/.snapshot/a".to_vec()],
                live: false,
                kind: Kind::File,
                size: 3,
                mtime: Ts {
                    sec: 1_795_551_302,
                    nsec: 7,
                },
                seen: Ts {
                    sec: 1_795_551_303,
                    nsec: 0,
                },
            },
            Version {
                snapshots: vec![],
                live: true,
                kind: Kind::Symlink,
                size: 11,
                mtime: Ts {
                    sec: 1_795_551_402,
                    nsec: 0,
                },
                seen: Ts {
                    sec: 1_795_551_502,
                    nsec: 0,
                },
            },
        ])),
        wire::encode_reply(&Reply::Deleted(vec![Deleted {
            path: b"a/b".to_vec(),
            snapshot: b"top/d/.snapshot/c".to_vec(),
            kind: Kind::Dir,
        }])),
        wire::encode_reply(&Reply::Restored(scion_fs::restore::RestoreReport {
            files: 3,
            dirs: 2,
            others: 1,
            bytes: 1 << 20,
            kept_as: Some(b"top.scion-restore-2026-11-24T201502Z".to_vec()),
        })),
        wire::encode_reply(&Reply::RolledBack),
        wire::encode_reply(&Reply::ScanRecorded),
        wire::encode_progress(4096, 0, "4096 blocks"),
        wire::encode_failure(&Failure::new(2, "/x: No such file or directory")),
    ];
    // Replies new in version 17 (the status with the engine lock's report, the open files
    // below a directory) are seeds of the control fuzz target.
    for (kind, name) in [(26, "seed-status-v17"), (41, "seed-open-below-v17")] {
        let reply = frames.iter().find(|f| f[1] == kind).expect("a reply of that kind");
        let seed = format!("{}/../../fuzz/corpus/control/{name}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("SCION_WRITE_SEEDS").is_some() {
            std::fs::write(&seed, reply).unwrap();
        }
        assert_eq!(reply, &std::fs::read(&seed).unwrap(), "{name} is out of date (SCION_WRITE_SEEDS=1 rewrites it)");
    }
    for b in &frames {
        let f = wire::decode_frame(b).unwrap();
        // Encoding what decoded gives the same bytes.
        let again = match &f {
            Frame::Reply(r) => wire::encode_reply(r),
            Frame::Progress { done, total, what } => wire::encode_progress(*done, *total, what),
            Frame::Failure(x) => wire::encode_failure(x),
            Frame::Part(_) | Frame::Gathered(_) => unreachable!("not among these frames"),
        };
        assert_eq!(&again, b, "{f:?}");
        for cut in 0..b.len() {
            assert!(wire::decode_frame(&b[..cut]).is_err(), "{f:?} cut at {cut}");
        }
    }
    // A version 1 daemon's answer: a status byte and a text.
    let e = wire::decode_frame(b"\x01control protocol version 2 is not supported").unwrap_err();
    assert!(e.contains("older scion"), "{e}");
}

#[test]
fn frames_are_bounded() {
    let mut big = (u32::MAX).to_le_bytes().to_vec();
    big.extend_from_slice(b"xx");
    assert!(wire::read_frame(&mut std::io::Cursor::new(big)).is_err());
    assert!(wire::write_frame(&mut Vec::new(), &vec![0; wire::MAX_MESSAGE + 1]).is_err());
}

fn scan_result(k: u8, status: i32) -> ScanResult {
    ScanResult {
        key: [k; 32],
        status,
        shown_as: b"/mnt/srv/vm1/etc/passwd".to_vec(),
        stdout: format!("{k} output\n").into_bytes(),
        stderr: b"warning\n".to_vec(),
    }
}

/// Decodes a reply's frames as `server::call` does: parts gathered, then completed.
fn gather(frames: &[Vec<u8>]) -> Result<Reply, String> {
    let mut parts = wire::Parts::default();
    for b in frames {
        match wire::decode_frame(b)? {
            Frame::Part(p) => parts.add(p)?,
            Frame::Gathered(end) => return parts.complete(end),
            Frame::Reply(r) => return Ok(r),
            f => return Err(format!("{f:?}")),
        }
    }
    Err("no end".into())
}

/// A diff and a scan too large for one frame travel in parts and arrive whole; a part lost
/// or a frame cut short is refused.
#[test]
fn replies_in_parts_arrive_whole() {
    use scion_fs::diff::{Change, Difference};
    let changes: Vec<Difference> = (0..40_000u64)
        .map(|i| Difference {
            change: if i % 7 == 0 { Change::Renamed } else { Change::Modified },
            path: format!("dir{}/file-with-a-longish-name-{i}", i % 100).into_bytes(),
            old_path: (i % 7 == 0).then(|| format!("old/{i}").into_bytes()),
            kind: Kind::File,
            old_size: i,
            new_size: i + 1,
        })
        .collect();
    let frames = wire::encode_reply_frames(&Reply::Diff(changes.clone()));
    assert!(frames.len() > 2, "{} frames", frames.len());
    assert!(frames.iter().all(|f| f.len() <= wire::MAX_MESSAGE));
    let Ok(Reply::Diff(got)) = gather(&frames) else { panic!() };
    assert_eq!(got, changes);
    let mut lost = frames.clone();
    lost.remove(1);
    assert!(gather(&lost).is_err());

    for b in &frames {
        for cut in [0, 1, b.len() / 2, b.len() - 1] {
            assert!(wire::decode_frame(&b[..cut]).is_err());
        }
    }
}

/// A streamed diff (protocol 15): the walk's parts, then the held run's, then the count;
/// gathered, the two runs merge in walk order; a walk part after a held one, or a count that
/// is not what came, is refused.
#[test]
fn a_diffs_two_runs_gather_in_walk_order() {
    use scion_fs::diff::{Change, Difference, Run};
    let d = |change, path: &str| Difference {
        change,
        path: path.as_bytes().to_vec(),
        old_path: (change == Change::Renamed).then(|| b"old".to_vec()),
        kind: Kind::File,
        old_size: 1,
        new_size: 2,
    };
    let walk: Vec<Difference> = (0..50_000).map(|i| d(Change::Modified, &format!("a/{i:05}"))).collect();
    let held = vec![d(Change::Renamed, "a/00001x"), d(Change::Added, "a.b")];
    let mut frames = wire::encode_diff_part(Run::Walk, &walk);
    assert!(frames.len() > 1 && frames.iter().all(|f| f.len() <= wire::MAX_MESSAGE));
    frames.extend(wire::encode_diff_part(Run::Held, &held));
    frames.push(wire::encode_reply(&Reply::DiffCount(50_002)));
    let Ok(Reply::Diff(got)) = gather(&frames) else { panic!() };
    assert_eq!(got.len(), 50_002);
    assert_eq!((got[2].path.as_slice(), got[50_001].path.as_slice()), (&b"a/00001x"[..], &b"a.b"[..]));
    let mut wrong = frames.clone();
    *wrong.last_mut().unwrap() = wire::encode_reply(&Reply::DiffCount(50_001));
    assert!(gather(&wrong).is_err());
    let mut late = wire::encode_diff_part(Run::Held, &held);
    late.extend(wire::encode_diff_part(Run::Walk, &walk[..1]));
    late.push(wire::encode_reply(&Reply::DiffCount(3)));
    assert!(gather(&late).is_err(), "a walk part after the held run");
    // The fuzz corpus's seed for a held part is these bytes.
    assert_eq!(wire::encode_diff_part(Run::Held, &held), [include_bytes!("../../../fuzz/corpus/control/seed-diff-held").to_vec()]);
}

/// A scan's parts (each too large for one frame travels in several) decode to what was
/// sent, kind by kind; a frame cut short is refused; gathered, they are refused (a scan's
/// parts go to the caller's sink, `call_parts`); the reply's counts round-trip.
#[test]
fn a_scans_parts_stream_whole() {
    let contents: Vec<([u8; 32], u64)> = (0..30_000u32).map(|i| ([i as u8; 32], i as u64)).collect();
    let files: Vec<(Vec<u8>, u32)> = (0..60_000u32).map(|i| (format!("vm{}/usr/lib/file{i}", i % 8).into_bytes(), i / 2)).collect();
    let pins = vec![(b"vm1".to_vec(), b"vm1/.snapshot/.scion-scan-00ff".to_vec())];
    let parts = [
        Part::ScanPins(pins),
        Part::ScanPins(vec![]),
        Part::ScanContents(contents),
        Part::ScanCached(vec![scan_result(1, 0), scan_result(9, 1)]),
        Part::ScanFiles(files),
        Part::ScanDenied(vec![b"vm1/root".to_vec()]),
    ];
    for part in parts {
        let frames = wire::encode_scan_part(&part);
        assert!(frames.iter().all(|f| f.len() <= wire::MAX_MESSAGE));
        let mut got: Vec<Part> = Vec::new();
        for f in &frames {
            for cut in [0, 1, f.len() / 2, f.len() - 1] {
                assert!(wire::decode_frame(&f[..cut]).is_err());
            }
            match wire::decode_frame(f).unwrap() {
                Frame::Part(p) => got.push(p),
                f => panic!("{f:?}"),
            }
        }
        let joined = got.into_iter().reduce(|a, b| match (a, b) {
            (Part::ScanContents(mut x), Part::ScanContents(y)) => { x.extend(y); Part::ScanContents(x) }
            (Part::ScanFiles(mut x), Part::ScanFiles(y)) => { x.extend(y); Part::ScanFiles(x) }
            (a, b) => panic!("{a:?} then {b:?}"),
        });
        assert_eq!(joined.as_ref(), Some(&part));
        assert!(gather(&frames).is_err(), "a scan's part gathered");
    }
    let n = ScanCounts { contents: 3, files: 9, denied: 1, cached: 2 };
    let r = wire::encode_reply(&Reply::Scanned(n));
    assert!(matches!(wire::decode_frame(&r).unwrap(), Frame::Reply(Reply::Scanned(m)) if m == n));
    // The fuzz corpus's seeds for these frames are these bytes.
    let pins = vec![(b"vm1".to_vec(), b"vm1/.snapshot/.scion-scan-00ff".to_vec())];
    assert_eq!(wire::encode_scan_part(&Part::ScanPins(pins)), [include_bytes!("../../../fuzz/corpus/control/seed-scan-pins").to_vec()]);
    assert_eq!(r, include_bytes!("../../../fuzz/corpus/control/seed-scanned"));
}

fn cube_row() -> scion_daemon::cubes::CubeRow {
    scion_daemon::cubes::CubeRow {
        id: 7,
        path: b"srv/db".to_vec(),
        mode: "ordered".into(),
        on_error: "fence".into(),
        state: "fenced".into(),
        why: "read of file oid 2: corrupt block".into(),
        used: 1 << 20,
    }
}

/// A stream part written in place is the message `encode_stream_part` makes, read back
/// borrowed as it is decoded; other messages are not taken for one.
#[test]
fn stream_parts_written_in_place_read_back_as_decoded() {
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let mut direct = Vec::new();
    wire::write_stream_part(&mut direct, &bytes).unwrap();
    let mut framed = Vec::new();
    wire::write_frame(&mut framed, &wire::encode_stream_part(&bytes)).unwrap();
    assert_eq!(direct, framed);
    let mut body = Vec::new();
    wire::read_frame_into(&mut &direct[..], &mut body).unwrap();
    assert_eq!(wire::stream_part(&body), Some(&bytes[..]));
    match wire::decode_frame(&body).unwrap() {
        wire::Frame::Part(wire::Part::Stream(b)) => assert_eq!(b, bytes),
        _ => panic!("not a stream part"),
    }
    // Cut, or longer than it says: not a stream part.
    assert_eq!(wire::stream_part(&body[..body.len() - 1]), None);
    assert_eq!(wire::stream_part(&body[..5]), None);
    let mut longer = body.clone();
    longer.push(0);
    assert_eq!(wire::stream_part(&longer), None);
    assert!(wire::write_stream_part(&mut Vec::new(), &vec![0; wire::MAX_MESSAGE]).is_err());
}
