//! Two volumes behind one router (issue 17 item 3): requests are routed by inode number, and
//! one volume's writes and fsyncs never wait for another's, not even for an fsync stuck on
//! its disk. The stuck disk is a host whose syncs wait at a gate the test opens, so what is
//! shown does not depend on timing: volume B completes its fsyncs while volume A's is held.

use scion_daemon::{Engine, Router, VolumeId};
use scion_fs::{errno, Fs, Ino, Kind, MountOptions};
use scion_store::host::{HostFile, HostFs, HostSpace, OpenMode};
use scion_store::Host;
use std::any::Any;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Syncs wait here while it is closed.
#[derive(Default)]
struct Gate {
    closed: Mutex<bool>,
    opened: Condvar,
    waiting: AtomicUsize,
}

impl Gate {
    fn set(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let mut closed = self.closed.lock().unwrap();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while *closed {
            closed = self.opened.wait(closed).unwrap();
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The real filesystem, with every file and directory sync passing the gate first.
struct GatedHost {
    inner: Host,
    gate: Arc<Gate>,
}

struct GatedFile {
    inner: Arc<dyn HostFile>,
    gate: Arc<Gate>,
}

impl HostFile for GatedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.gate.pass();
        self.inner.sync_data()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.punch_hole(offset, len)
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.allocate(offset, len)
    }
}

impl HostFs for GatedHost {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn HostFile>> {
        Ok(Arc::new(GatedFile {
            inner: self.inner.open(path, mode)?,
            gate: self.gate.clone(),
        }))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.gate.pass();
        self.inner.sync_dir(path)
    }
    fn allocated_bytes(&self, path: &Path) -> io::Result<u64> {
        self.inner.allocated_bytes(path)
    }
    fn space(&self, path: &Path) -> io::Result<HostSpace> {
        self.inner.space(path)
    }
    fn lock(&self, dir: &Path, holder: &str) -> scion_store::Result<Box<dyn Any + Send>> {
        self.inner.lock(dir, holder)
    }
}

/// A new store at `dir` opened on `host`, as an engine.
fn volume(dir: &Path, host: Host) -> Engine {
    Fs::create(&host, dir).unwrap();
    let mut fs = Fs::open(
        dir,
        MountOptions {
            holder: "test".into(),
            host,
        },
    )
    .unwrap();
    fs.set_punch_later(true);
    Engine::new(fs)
}

/// Creates `name` in the root of `vol` through the router; returns its kernel inode number.
fn create(router: &Router, vol: VolumeId, name: &[u8]) -> Ino {
    let (_, engine, root) = router.route(vol.global(scion_fs::ROOT_INO)).unwrap();
    let a = engine
        .lock()
        .mknod(root, name, Kind::File, 0o644, 0, 0, 0, 0, &[])
        .unwrap();
    vol.global(a.ino)
}

/// A 4 KiB write then an fsync, routed as a FUSE request is; returns the fsync's latency.
fn write_and_fsync(router: &Router, ino: Ino, at: u64) -> Duration {
    let (_, engine, local) = router.route(ino).unwrap();
    engine.write(local, at * 4096, &[at as u8; 4096], scion_fs::Stamp::Now, |_| Ok(())).unwrap();
    let t0 = Instant::now();
    engine.fsync().unwrap();
    t0.elapsed()
}

/// A new store at `dir` on the real filesystem whose syncs pass the returned gate.
fn gated_volume(dir: &Path) -> (Engine, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let host = Arc::new(GatedHost {
        inner: scion_store::os_host(),
        gate: gate.clone(),
    });
    (volume(dir, host), gate)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn an_fsync_in_one_volume_never_waits_for_another() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, gate) = gated_volume(&tmp.path().join("a"));
    let b = volume(&tmp.path().join("b"), scion_store::os_host());
    let router = Arc::new(Router::new(a).unwrap());
    let vb = router.add(b).unwrap();
    assert_ne!(vb, VolumeId::MAIN);
    let fa = create(&router, VolumeId::MAIN, b"a");
    let fb = create(&router, vb, b"b");
    assert_eq!(VolumeId::of(fb), vb);
    assert_ne!(
        VolumeId::local(fb),
        fb,
        "volume B's inode numbers carry its volume bits"
    );

    const N: u64 = 20;
    let alone = median((0..N).map(|i| write_and_fsync(&router, fb, i)).collect());

    // Volume A's fsync is stuck on its disk.
    gate.set(true);
    let a_done = Arc::new(AtomicBool::new(false));
    let held = {
        let (router, a_done) = (router.clone(), a_done.clone());
        std::thread::spawn(move || {
            let d = write_and_fsync(&router, fa, 0);
            a_done.store(true, Ordering::SeqCst);
            d
        })
    };
    let t0 = Instant::now();
    while gate.waiting.load(Ordering::SeqCst) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "volume A's fsync never reached its disk"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Meanwhile volume B writes and fsyncs, and so does a lookup in A (its lock is free).
    // In a thread, so that a B waiting for A fails the test instead of hanging it.
    let b_work = {
        let router = router.clone();
        std::thread::spawn(move || (0..N).map(|i| write_and_fsync(&router, fb, N + i)).collect::<Vec<_>>())
    };
    let t0 = Instant::now();
    while !b_work.is_finished() {
        if t0.elapsed() > Duration::from_secs(30) {
            gate.set(false);
            panic!("volume B's fsyncs waited for volume A's");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let beside = b_work.join().unwrap();
    let (_, ea, root_a) = router.route(scion_fs::ROOT_INO).unwrap();
    assert!(
        ea.lock().lookup(root_a, b"a").is_ok(),
        "volume A's lock is held by its fsync"
    );
    assert!(
        !a_done.load(Ordering::SeqCst),
        "volume A's fsync finished with its disk held: the gate does not hold"
    );
    let beside = median(beside);
    gate.set(false);
    let a_latency = held.join().unwrap();
    eprintln!(
        "volume B fsync median: alone {alone:?}, with volume A's fsync held {beside:?} \
         (A's fsync took {a_latency:?})"
    );

    // B's data is all there.
    let (_, eb, lb) = router.route(fb).unwrap();
    let plan = eb.lock().read_plan(lb, 4096 * (2 * N - 1), 4096).unwrap();
    let mut buf = vec![0u8; plan.len()];
    plan.fill(&mut buf).unwrap();
    assert_eq!(buf, vec![(2 * N - 1) as u8; 4096]);
}

/// The control: within one volume an fsync does wait for the disk held by another, so the
/// test above would fail if both files were routed to one volume.
#[test]
fn within_one_volume_an_fsync_waits_for_the_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, gate) = gated_volume(&tmp.path().join("a"));
    let router = Arc::new(Router::new(a).unwrap());
    let f1 = create(&router, VolumeId::MAIN, b"1");
    let f2 = create(&router, VolumeId::MAIN, b"2");
    gate.set(true);
    let spawn = |ino| {
        let router = router.clone();
        std::thread::spawn(move || write_and_fsync(&router, ino, 0))
    };
    let first = spawn(f1);
    let second = spawn(f2);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!first.is_finished() && !second.is_finished());
    gate.set(false);
    first.join().unwrap();
    second.join().unwrap();
}

#[test]
fn routing_refuses_what_it_does_not_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let router = Router::new(volume(&tmp.path().join("a"), scion_store::os_host())).unwrap();
    let vb = router
        .add(volume(&tmp.path().join("b"), scion_store::os_host()))
        .unwrap();
    let fb = create(&router, vb, b"b");
    assert!(router.route(fb).is_ok());
    let gen_b = router.generation(vb);
    assert_ne!(gen_b, 0, "a cube's entries have a generation of their own");
    let engine = router.remove(vb).unwrap();
    engine.close().unwrap();
    assert_eq!(
        router.route(fb).err(),
        Some(errno::ESTALE),
        "a removed volume's inodes are stale"
    );
    assert_eq!(router.volumes().len(), 1);
    // The kernel still holds fb (mknod's reference): the slot is not given to the next
    // volume, whose inodes fb's number would name, and whose counts fb's FORGET would take.
    let vc = router
        .add(volume(&tmp.path().join("c"), scion_store::os_host()))
        .unwrap();
    assert_ne!(vc, vb, "a slot whose inodes the kernel holds went to another volume");
    // Once the kernel forgets them, the slot serves again, with a new generation.
    assert!(router.forget_retired(fb, 1));
    let vd = router
        .add(volume(&tmp.path().join("d"), scion_store::os_host()))
        .unwrap();
    assert_eq!(vd, vb);
    assert_ne!(router.generation(vd), gen_b);
    assert_ne!(router.generation(vd), router.generation(vc));
    assert_eq!(router.generation(VolumeId::MAIN), 0);
}
