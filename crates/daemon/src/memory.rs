//! What the daemon holds in memory beyond its engines (issue 39), for `scion status`: its
//! resident set, and the directory listings open directory handles keep. The engines report
//! their own (`scion_fs::status::Memory`).

use std::sync::atomic::{AtomicU64, Ordering};

static LISTINGS: AtomicU64 = AtomicU64::new(0);
static LISTING_BYTES: AtomicU64 = AtomicU64::new(0);

/// An open directory handle now keeps a listing of `bytes`.
pub fn listing_opened(bytes: u64) {
    LISTINGS.fetch_add(1, Ordering::Relaxed);
    LISTING_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// A listing counted by `listing_opened` was given back.
pub fn listing_closed(bytes: u64) {
    LISTINGS.fetch_sub(1, Ordering::Relaxed);
    LISTING_BYTES.fetch_sub(bytes, Ordering::Relaxed);
}

/// Open directory handles' listings: how many, and their bytes.
pub fn listings() -> (u64, u64) {
    (LISTINGS.load(Ordering::Relaxed), LISTING_BYTES.load(Ordering::Relaxed))
}

/// This process's resident set in bytes (0 if `/proc` does not say).
pub fn rss_bytes() -> u64 {
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .map_or(0, |pages| pages * page)
}
