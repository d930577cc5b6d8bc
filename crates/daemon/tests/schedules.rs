//! The scheduler driven as a library with its own clock, on the simulated host: snapshots
//! on time and one at "mount" for those missed, the keep policy applied as it runs, space
//! thresholds against a host whose capacity the test sets, and schedules kept in the store
//! across a reopen.

use scion_daemon::{scheduler, Engine};
use scion_fs::schedule::retention::{Keep, Thresholds};
use scion_fs::schedule::Schedule;
use scion_fs::{Fs, Kind, MountOptions};
use scion_store::sim::SimHost;
use std::path::Path;
use std::sync::Arc;

const T0: i64 = 1_795_551_302; // 2026-11-24T20:15:02Z

fn open(sim: &SimHost) -> Engine {
    let fs = Fs::open(
        Path::new("/store"),
        MountOptions {
            holder: "test".into(),
            host: Arc::new(sim.clone()),
        },
    )
    .unwrap();
    Engine::new(fs)
}

fn new_store() -> SimHost {
    let sim = SimHost::default();
    Fs::create(&(Arc::new(sim.clone()) as scion_store::Host), Path::new("/store")).unwrap();
    sim
}

fn scheduled(engine: &Engine, dir: &[u8]) -> Vec<(Vec<u8>, i64)> {
    let mut fs = engine.lock();
    let d = fs.resolve_path(dir).unwrap();
    fs.dir_snapshots(d)
        .unwrap()
        .into_iter()
        .filter(|s| s.scheduled)
        .map(|s| (s.name, s.created))
        .collect()
}

fn schedule(dir: &[u8], every: u64, keep: &str, limits: Thresholds) -> Schedule {
    Schedule {
        dir: dir.to_vec(),
        every,
        keep: Keep::parse(keep).unwrap(),
        limits,
    }
}

#[test]
fn snapshots_on_time_thinned_and_kept_across_reopen() {
    let sim = new_store();
    let engine = open(&sim);
    {
        let mut fs = engine.lock();
        let root = fs.root();
        fs.mknod(root, b"w", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap();
        let w = fs.resolve_path(b"w").unwrap();
        fs.snapshot(w, b"mine", b"/w").unwrap();
        fs.set_schedule(schedule(b"w", 600, "last=3,hourly=2", Thresholds::default()))
            .unwrap();
    }
    // Every minute for three hours of simulated time.
    for m in 0..180 {
        scheduler::run(&engine, T0 + m * 60, m == 0, None);
    }
    let s = scheduled(&engine, b"w");
    // 18 taken (every 10 minutes, 20:15 to 23:05); kept: the newest 3 (22:45, 22:55, 23:05),
    // which hold the newest of each of the 2 newest hours (23:05, 22:55).
    let times: Vec<i64> = s.iter().map(|x| x.1).collect();
    assert_eq!(times, vec![T0 + 150 * 60, T0 + 160 * 60, T0 + 170 * 60], "{s:?}");
    assert_eq!(&s[2].0, b"2026-11-24T230502Z");
    // The hand-made snapshot stays.
    {
        let mut fs = engine.lock();
        let w = fs.resolve_path(b"w").unwrap();
        assert!(fs
            .dir_snapshots(w)
            .unwrap()
            .iter()
            .any(|x| x.name == b"mine" && !x.scheduled));
    }
    engine.close().unwrap();
    drop(engine);

    // Reopened an hour later: the schedule is still there, and one snapshot is taken at
    // once for the six missed, not six.
    let engine = open(&sim);
    assert_eq!(engine.lock().schedule_list().unwrap().len(), 1);
    scheduler::run(&engine, T0 + 240 * 60, true, None);
    let s2: Vec<i64> = scheduled(&engine, b"w").iter().map(|x| x.1).collect();
    // 00:15 taken; 22:45 goes (neither among the newest 3 nor the newest of hours 00 and 23).
    assert_eq!(s2, vec![T0 + 160 * 60, T0 + 170 * 60, T0 + 240 * 60]);
    scheduler::run(&engine, T0 + 241 * 60, false, None);
    assert_eq!(scheduled(&engine, b"w").len(), 3, "not due again for ten minutes");
    // A name taken by hand gets a suffix.
    {
        let mut fs = engine.lock();
        let w = fs.resolve_path(b"w").unwrap();
        fs.snapshot(w, b"2026-11-25T002502Z", b"/w").unwrap();
    }
    scheduler::run(&engine, T0 + 250 * 60, false, None);
    assert!(scheduled(&engine, b"w").iter().any(|x| x.0 == b"2026-11-25T002502Z-1"));
    engine.close().unwrap();
    let rep =
        scion_fs::check::check_committed(&(Arc::new(sim.clone()) as scion_store::Host), Path::new("/store")).unwrap();
    assert!(rep.is_clean(), "{rep}");
}

#[test]
fn space_thresholds_on_a_host_running_short() {
    let sim = new_store();
    let engine = open(&sim);
    let data = vec![7u8; 1 << 20];
    {
        let mut fs = engine.lock();
        let root = fs.root();
        fs.mknod(root, b"w", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap();
        let limits = Thresholds {
            keep_while_free: Some(50),
            min_free: None,
        };
        fs.set_schedule(schedule(b"w", 60, "last=1", limits)).unwrap();
    }
    // Each snapshot holds a MiB of its own: a file rewritten between them.
    for i in 0..5u8 {
        {
            let mut fs = engine.lock();
            let w = fs.resolve_path(b"w").unwrap();
            let f = match fs.lookup(w, b"f") {
                Ok(a) => a.ino,
                Err(_) => fs.mknod(w, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap().ino,
            };
            let data: Vec<u8> = data.iter().map(|b| b ^ i).collect();
            fs.write(f, 0, &data).unwrap();
            fs.fsync().unwrap();
        }
        scheduler::run(&engine, T0 + i64::from(i) * 60, i == 0, None);
    }
    assert_eq!(
        scheduled(&engine, b"w").len(),
        5,
        "plenty of room: the policy's castoffs stay"
    );
    // `df` counts what those castoffs would give back as available: four MiB, each held by
    // one snapshot alone.
    let (with, bsize) = {
        let st = engine.lock().statfs();
        (st.bavail, u64::from(st.bsize))
    };
    engine.lock().set_reclaimable(b"w", 0);
    let without = engine.lock().statfs().bavail;
    let extra = (with - without) * bsize;
    assert!(
        (4 << 20..=5 << 20).contains(&extra),
        "{extra} bytes counted as reclaimable"
    );
    // The host is now 40% free: below the 50% line, castoffs go, oldest first.
    let used = sim.image().bytes();
    sim.set_capacity(used * 10 / 6);
    scheduler::run(&engine, T0 + 5 * 60, false, None);
    let left = scheduled(&engine, b"w");
    assert!(left.len() < 6 && left.len() >= 1, "{left:?}");
    assert_eq!(left.last().unwrap().1, T0 + 5 * 60, "the newest stays");
    // --min-free: below it kept ones go too, never the newest.
    {
        let mut fs = engine.lock();
        let limits = Thresholds {
            keep_while_free: None,
            min_free: Some(90),
        };
        fs.set_schedule(schedule(b"w", 60, "last=10", limits)).unwrap();
    }
    scheduler::run(&engine, T0 + 6 * 60, false, None);
    let left = scheduled(&engine, b"w");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].1, T0 + 6 * 60);
    engine.close().unwrap();
}

#[test]
fn retention_keeps_a_mirrors_base_and_with_keep_unmirrored_what_it_has_not_sent() {
    let sim = new_store();
    let engine = open(&sim);
    {
        let mut fs = engine.lock();
        let root = fs.root();
        fs.mknod(root, b"w", Kind::Dir, 0o755, 0, 0, 0, 0, &[]).unwrap();
        fs.set_schedule(schedule(b"w", 60, "last=2", Thresholds::default())).unwrap();
        // No transfer runs here (no mount): the mirror stays where the test puts it.
        fs.set_mirror(b"w", b"/backup/w", false).unwrap();
    }
    for m in 0..3 {
        scheduler::run(&engine, T0 + m * 60, m == 0, None);
    }
    // The oldest still here is what the mirror holds.
    let first = scheduled(&engine, b"w")[0].0.clone();
    engine.lock().mirror_arrived(b"w", b"/backup/w", &first, T0 + 60).unwrap();
    for m in 3..8 {
        scheduler::run(&engine, T0 + m * 60, false, None);
    }
    // last=2 keeps the newest two; the mirror's base stays too.
    let s: Vec<Vec<u8>> = scheduled(&engine, b"w").into_iter().map(|x| x.0).collect();
    assert_eq!(s.len(), 3, "{s:?}");
    assert_eq!(s[0], first);

    // With --keep-unmirrored, nothing after the base goes until it is sent.
    engine.lock().set_mirror(b"w", b"/backup/w", true).unwrap();
    for m in 8..12 {
        scheduler::run(&engine, T0 + m * 60, false, None);
    }
    assert_eq!(scheduled(&engine, b"w").len(), 3 + 4);
    // Sent up to the newest: the policy applies again (the base stays).
    let newest = scheduled(&engine, b"w").last().unwrap().0.clone();
    engine.lock().mirror_arrived(b"w", b"/backup/w", &newest, T0 + 11 * 60).unwrap();
    scheduler::run(&engine, T0 + 12 * 60, false, None);
    let s: Vec<Vec<u8>> = scheduled(&engine, b"w").into_iter().map(|x| x.0).collect();
    assert_eq!(s.len(), 2, "{s:?}");
    assert!(s.contains(&newest));
    engine.close().unwrap();
}
