//! A panic in the background worker (a bug) fails the volume instead of silently ending
//! background syncs and checkpoints. Alone in its test binary: the failpoint it arms is
//! process-wide.

use scion_daemon::{Background, BackgroundOptions};

mod common;
use common::{engine, wait_for};
use scion_fs::Kind;
use std::time::Duration;

#[test]
fn a_panic_in_the_worker_fails_the_volume() {
    let (_tmp, _store, engine) = engine();
    let opts = BackgroundOptions {
        period: Duration::from_millis(10),
        checkpoint_after: Duration::ZERO,
        repack: false,
        schedules: false,
        compress_old: false,
        mirrors: None,
        companions: None,
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
        Err(scion_fs::errno::EIO)
    );
}
