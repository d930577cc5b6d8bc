//! The service layer driven as a library: the background worker makes acknowledged writes
//! durable and takes checkpoints on its own, concurrent writers go through the write-ahead
//! protocol. (A panic in the worker: `worker_panic.rs`, alone in its binary because the
//! failpoint it arms is process-wide.)

use scion_daemon::{Background, BackgroundOptions};

mod common;
use common::{engine, wait_for};
use scion_fs::check::check_committed;
use scion_fs::Kind;
use std::time::Duration;

#[test]
fn the_worker_syncs_and_checkpoints_on_its_own() {
    let (_tmp, store, engine) = engine();
    let opts = BackgroundOptions {
        period: Duration::from_millis(20),
        checkpoint_after: Duration::from_millis(100),
        repack: false,
        schedules: false,
        compress_old: false,
        mirrors: None,
        companions: None,
    };
    let bg = Background::start(engine.clone(), opts, Box::new(|_| {}));
    // Four writers at once, whole chunks and partial ones, through the write-ahead protocol.
    let writers: Vec<_> = (0..4u8)
        .map(|w| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let root = engine.lock().root();
                let name = format!("w{w}");
                let ino = engine
                    .lock()
                    .mknod(root, name.as_bytes(), Kind::File, 0o644, 0, 0, 0, 0, &[])
                    .unwrap()
                    .ino;
                let data = vec![w + 1; 200_000];
                assert_eq!(engine.write(ino, 0, &data, scion_fs::Stamp::Now, |_| Ok(())), Ok(200_000));
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    // No fsync, no checkpoint asked for: the worker's sync empties the journal buffer and
    // its checkpoint commits the files.
    wait_for("the background sync", || !engine.lock().needs_sync());
    wait_for("the background checkpoint", || {
        check_committed(&scion_store::os_host(), &store).is_ok_and(|r| r.files == 4 && r.is_clean())
    });
    bg.stop();
    engine.close().unwrap();
    assert!(engine.lock().failure().is_some(), "closed: changes refused");
}
