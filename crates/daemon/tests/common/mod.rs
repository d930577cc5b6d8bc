//! Helpers the service layer's tests share.
#![allow(dead_code)]

use scion_daemon::Engine;
use scion_fs::{Fs, MountOptions};
use std::time::{Duration, Instant};

/// A fresh store's engine (the temporary directory lives as long as the first element).
pub fn engine() -> (tempfile::TempDir, std::path::PathBuf, Engine) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    Fs::create(&scion_store::os_host(), &store).unwrap();
    let mut fs = Fs::open(&store, MountOptions::new("test")).unwrap();
    fs.set_punch_later(true);
    (tmp, store, Engine::new(fs))
}

/// Waits (at most 20 s) until `cond` holds.
pub fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
