//! The allocator: mimalloc for processes that run the engine (the daemon, `serve`, commands
//! on an unmounted `--store`), the C library's for the rest, which start, send one request
//! to the daemon and exit.
//!
//! Why two. The daemon keeps every file's unflushed data in many small buffers between
//! checkpoints; glibc's allocator spent ~14% of an untar's daemon time searching its bins
//! (78,579 files), so the daemon uses mimalloc (built without transparent huge pages,
//! `no_thp`: a 2 MiB page stays resident while any of it is used). But setting mimalloc up
//! touches ~110 fresh pages, a quarter of the page faults of starting `scion clone`, whose
//! whole run is a few milliseconds (issue 38 item 3).
//!
//! Which one is chosen from the command line by a constructor that runs before `main` and
//! before any Rust allocation, and never changes afterwards: every block is freed by the
//! allocator that made it. If anything allocated before the choice, the C library's stays.

use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const LIBC: u8 = 1;
const MIMALLOC: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

pub struct Alloc;

impl Alloc {
    /// The allocator in use; the first allocation settles an undecided choice on libc's.
    #[inline]
    fn mimalloc(&self) -> bool {
        match CHOICE.load(Ordering::Relaxed) {
            MIMALLOC => true,
            LIBC => false,
            _ => {
                let _ = CHOICE.compare_exchange(UNDECIDED, LIBC, Ordering::Relaxed, Ordering::Relaxed);
                CHOICE.load(Ordering::Relaxed) == MIMALLOC
            }
        }
    }
}

unsafe impl GlobalAlloc for Alloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.mimalloc() {
            MiMalloc.alloc(layout)
        } else {
            System.alloc(layout)
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.mimalloc() {
            MiMalloc.alloc_zeroed(layout)
        } else {
            System.alloc_zeroed(layout)
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.mimalloc() {
            MiMalloc.dealloc(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.mimalloc() {
            MiMalloc.realloc(ptr, layout, new_size)
        } else {
            System.realloc(ptr, layout, new_size)
        }
    }
}

/// True if this process runs the engine for long: `mount` (the daemon is `scion mount
/// --foreground`), `serve`, anything given `--store` (the engine in this process), and the
/// mount helper forms (`mount.fuse.scion ...`, `scion STORE MOUNTPOINT ...`).
fn runs_the_engine(args: &[&[u8]]) -> bool {
    let helper = args
        .first()
        .and_then(|a| a.rsplit(|b| *b == b'/').next())
        .is_some_and(|name| name.starts_with(b"mount."));
    let first = args.get(1).copied().unwrap_or_default();
    let bare = !first.is_empty() && !first.starts_with(b"-") && !crate::is_command(first);
    helper
        || bare
        || first == b"mount"
        || first == b"serve"
        || args
            .iter()
            .skip(1)
            .any(|a| *a == b"--store" || a.starts_with(b"--store="))
}

/// Chooses the allocator from `argv` (glibc passes `argc, argv, envp` to an executable's
/// constructors). Allocates nothing.
extern "C" fn choose(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    const MAX_ARGS: usize = 64;
    let mut args: [&[u8]; MAX_ARGS] = [&[]; MAX_ARGS];
    let n = (argc.max(0) as usize).min(MAX_ARGS);
    for (i, slot) in args.iter_mut().enumerate().take(n) {
        // SAFETY: glibc hands constructors the process's argv: argc valid C strings.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            break;
        }
        *slot = unsafe { CStr::from_ptr(p) }.to_bytes();
    }
    let want = if runs_the_engine(&args[..n]) { MIMALLOC } else { LIBC };
    let _ = CHOICE.compare_exchange(UNDECIDED, want, Ordering::Relaxed, Ordering::Relaxed);
}

// Before the standard library's own (`.init_array.00099`) and every unnumbered constructor.
#[used]
#[link_section = ".init_array.00050"]
static CHOOSE: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = choose;

/// True if the daemon's allocator is mimalloc (the choice made at start).
pub fn is_mimalloc() -> bool {
    CHOICE.load(Ordering::Relaxed) == MIMALLOC
}

#[cfg(test)]
mod tests {
    use super::runs_the_engine;

    fn v(a: &[&'static str]) -> Vec<&'static [u8]> {
        a.iter().map(|s| s.as_bytes()).collect()
    }

    #[test]
    fn the_engine_runs_in_the_daemon_serve_and_store_commands() {
        for a in [
            &["scion", "mount", "--foreground", "/s", "/m"][..],
            &["scion", "serve", "nfs", "--store", "/s"],
            &["scion", "clone", "--store", "/s", "/a", "/b"],
            &["scion", "check", "--store=/s"],
            &["/sbin/mount.fuse.scion", "/s", "/m", "-o", "rw"],
            &["scion", "/s", "/m", "-o", "rw"],
        ] {
            assert!(runs_the_engine(&v(a)), "{a:?}");
        }
        for a in [
            &["scion", "clone", "/m/a", "/m/b"][..],
            &["scion", "--version"],
            &["scion"],
            &["scion", "status", "--json"],
            &["scion", "snapshot", "/m/a", "v1"],
        ] {
            assert!(!runs_the_engine(&v(a)), "{a:?}");
        }
    }
}
