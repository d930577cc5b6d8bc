//! The allocator: mimalloc for processes that run the engine (the daemon, `serve`, `check`,
//! commands on an unmounted `--store`), the C library's for the rest, which start, send one request
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
//!
//! Even under mimalloc, blocks of [`LARGE`] bytes or more come from the C library's. The
//! daemon tells mimalloc to give freed pages back at once (`return_freed_memory`, issue 39),
//! so each 1 MiB buffer freed (an NFS READ's data and its reply, every request) was unmapped
//! and the next one faulted its 256 pages in again and zeroed them: a quarter of the NFS
//! server's time reading a cached file. glibc keeps freed blocks of that size for the next
//! (its mmap threshold rises to the largest freed), and there are few of them. Rust frees and
//! reallocates with the layout it allocated with, so the size says which allocator owns a
//! block.

use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const LIBC: u8 = 1;
const MIMALLOC: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

pub struct Alloc;

/// Blocks this large or larger come from the C library's allocator even in the daemon.
pub const LARGE: usize = 256 << 10;

impl Alloc {
    /// The allocators in use; the first allocation settles an undecided choice on libc's.
    #[inline]
    fn routed(&self) -> Routed {
        let mimalloc = match CHOICE.load(Ordering::Relaxed) {
            MIMALLOC => true,
            LIBC => false,
            _ => {
                let _ = CHOICE.compare_exchange(UNDECIDED, LIBC, Ordering::Relaxed, Ordering::Relaxed);
                CHOICE.load(Ordering::Relaxed) == MIMALLOC
            }
        };
        Routed { mimalloc }
    }
}

unsafe impl GlobalAlloc for Alloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.routed().alloc(layout)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.routed().alloc_zeroed(layout)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.routed().dealloc(ptr, layout)
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.routed().realloc(ptr, layout, new_size)
    }
}

/// Blocks by size: mimalloc's below `LARGE` when `mimalloc`, the C library's otherwise.
struct Routed {
    mimalloc: bool,
}

impl Routed {
    #[inline]
    fn small(&self, size: usize) -> bool {
        self.mimalloc && size < LARGE
    }
}

unsafe impl GlobalAlloc for Routed {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.small(layout.size()) {
            MiMalloc.alloc(layout)
        } else {
            System.alloc(layout)
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.small(layout.size()) {
            MiMalloc.alloc_zeroed(layout)
        } else {
            System.alloc_zeroed(layout)
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.small(layout.size()) {
            MiMalloc.dealloc(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (self.small(layout.size()), self.small(new_size)) {
            (true, true) => MiMalloc.realloc(ptr, layout, new_size),
            (false, false) => System.realloc(ptr, layout, new_size),
            // Across `LARGE`: moved to the other allocator.
            _ => {
                // SAFETY: the caller promises `new_size`, rounded to the alignment, fits isize.
                let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
                    unsafe { self.dealloc(ptr, layout) };
                }
                new
            }
        }
    }
}

/// True if this process runs the engine for long: `mount` (the daemon is `scion mount
/// --foreground`), `serve`, `check` (a store's whole walk), anything given `--store` (the
/// engine in this process), and the mount helper forms (`mount.fuse.scion ...`, `scion STORE
/// MOUNTPOINT ...`).
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
        || first == b"check"
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
    use super::{runs_the_engine, Routed, LARGE};
    use std::alloc::{GlobalAlloc, Layout};

    /// Blocks grown and shrunk across `LARGE` keep their bytes (they change allocator).
    #[test]
    fn a_block_reallocated_across_the_bound_keeps_its_bytes() {
        for (a, from, to) in [true, false].into_iter().flat_map(|mimalloc| {
            [
                (1000, LARGE + 10),
                (LARGE * 2, 100),
                (LARGE - 1, LARGE),
                (LARGE, LARGE - 1),
                (64, 128),
            ]
            .map(|(f, t)| (Routed { mimalloc }, f, t))
        }) {
            let layout = Layout::from_size_align(from, 16).unwrap();
            unsafe {
                let p = a.alloc(layout);
                assert!(!p.is_null());
                for i in 0..from {
                    *p.add(i) = (i % 251) as u8;
                }
                let q = a.realloc(p, layout, to);
                assert!(!q.is_null());
                for i in 0..from.min(to) {
                    assert_eq!(*q.add(i), (i % 251) as u8, "byte {i} of {from} -> {to}");
                }
                a.dealloc(q, Layout::from_size_align(to, 16).unwrap());
            }
        }
    }

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
            &["scion", "check", "/s"],
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
