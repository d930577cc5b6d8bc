//! A panic in the background worker (a bug) fails the volume instead of silently ending
//! background syncs and checkpoints. Alone in its test binary: the failpoint it arms is
//! process-wide.

use scion_daemon::{Background, BackgroundOptions, Engine};
use scion_fs::{Fs, Kind, MountOptions};
use std::time::{Duration, Instant};

fn engine() -> (tempfile::TempDir, Engine) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    Fs::create(&scion_store::os_host(), &store).unwrap();
    let fs = Fs::open(&store, MountOptions::new("test")).unwrap();
    (tmp, Engine::new(fs))
}

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_panic_in_the_worker_fails_the_volume() {
    let (_tmp, engine) = engine();
    let opts = BackgroundOptions {
        period: Duration::from_millis(10),
        checkpoint_after: Duration::ZERO,
        repack: false,
    };
    {
        let mut fs = engine.lock();
        let root = fs.root();
        fs.mknod(root, b"f", Kind::File, 0o644, 0, 0, 0, 0, &[]).unwrap();
    }
    scion_fs::failpoint::arm("checkpoint", 1);
    let bg = Background::start(engine.clone(), opts, Box::new(|_| {}));
    wait_for("the volume to fail", || engine.lock().failure().is_some());
    bg.stop();
    scion_fs::failpoint::clear();
    let mut fs = engine.lock();
    let root = fs.root();
    assert_eq!(
        fs.mknod(root, b"g", Kind::File, 0o644, 0, 0, 0, 0, &[]).map(|_| ()),
        Err(libc::EIO)
    );
}
