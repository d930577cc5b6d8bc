//! FUSE over io_uring (Linux 6.14 and later). Added by scion's patch; see PATCH.md.
//!
//! With `/dev/fuse`, a request from a process on one CPU wakes a daemon thread that may sleep on
//! the other, and each cross-CPU wake-up costs more than the work (67-154 us per round trip on a
//! 2-vCPU VM, against ~19 us on one CPU). The kernel's io_uring transport keeps one queue per
//! CPU: a request is delivered to the queue of the CPU its caller runs on. Here each queue is
//! served by a thread pinned to that CPU with its own ring, so caller and server share a CPU.
//!
//! Protocol (include/uapi/linux/fuse.h, fs/fuse/dev_uring.c): after FUSE_INIT, negotiated with
//! `FUSE_OVER_IO_URING`, each queue registers ring entries with IORING_OP_URING_CMD
//! (`FUSE_IO_URING_CMD_REGISTER`, 128-byte SQEs): `addr` points at two iovecs, a 288-byte
//! header (`struct fuse_uring_req_header`) and a payload buffer of at least the connection's
//! largest request. A completion means the kernel filled the entry with a request: the
//! `fuse_in_header` in `in_out`, the opcode's own argument struct in `op_in`, the rest of the
//! arguments in the payload (`ring_ent_in_out.payload_sz` bytes). The reply goes into the same
//! buffers (`fuse_out_header` in `in_out`, the reply body in the payload) and is handed back
//! with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also re-arms the entry. FORGET, INTERRUPT
//! and notifications keep using `/dev/fuse`, so the classic loop keeps running beside the rings.
//!
//! Requests are reassembled into the classic layout (header, op struct, payload) in a buffer of
//! the thread's own and dispatched by the same code as `/dev/fuse` requests, so the filesystem
//! sees no difference. The one rule a filesystem must keep: reply before the method returns
//! (a later reply is refused with an error and the kernel gets EIO), because the ring entry is
//! re-armed as soon as dispatch is done.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use log::{debug, error, warn};

use crate::Filesystem;
use crate::channel::ChannelSender;
use crate::ll;
use crate::reply::ReplyEmpty;
use crate::request::{ReplyTo, RequestWithSender};
use crate::session::SessionEventLoop;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: in_out[128], op_in[128], fuse_uring_ent_in_out (32 bytes).
const HEADER_SIZE: usize = 288;
const OP_IN: usize = 128;
const OP_IN_MAX: usize = 128;
/// Where a request's payload starts in the reassembly buffer: a page boundary past the
/// largest header and op struct.
const PAYLOAD_AT: usize = 4096;
const _: () = assert!(PAYLOAD_AT >= IN_HEADER + OP_IN_MAX);
/// `fuse_uring_ent_in_out`: flags u64, commit_id u64, payload_sz u32, padding u32, reserved u64.
const ENT_COMMIT_ID: usize = 256 + 8;
const ENT_PAYLOAD_SZ: usize = 256 + 16;
/// sizeof(struct fuse_in_header) / sizeof(struct fuse_out_header)
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// The kernel's smallest request buffer (FUSE_MIN_READ_BUFFER).
const MIN_PAYLOAD: usize = 8192;

/// What the rings need from the negotiated connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingParams {
    /// Bytes of each entry's payload buffer: at least the kernel's `max_payload_sz`,
    /// max(FUSE_MIN_READ_BUFFER, max_write, max_pages * PAGE_SIZE).
    pub(crate) payload_size: usize,
    /// Entries per ring: requests a ring can hold in flight.
    pub(crate) depth: u32,
    /// Rings (threads) per queue. A queue thread serves one request at a time; the others
    /// keep the queue going while it waits for the disk (readahead of a sequential read sends
    /// several READs at once, all to the reader's CPU: a cold 1 GiB read took 2.2 s with one
    /// ring, 1.5 s with two; with long reads past the host's cache, 0.70-0.79 s with two and
    /// 0.63-0.68 s with four).
    pub(crate) rings: usize,
}

impl RingParams {
    pub(crate) fn new(max_write: u32, max_pages: u16) -> RingParams {
        let pages = max_pages as usize * page_size::get();
        RingParams {
            payload_size: MIN_PAYLOAD.max(max_write as usize).max(pages),
            depth: 2,
            rings: 4,
        }
    }
}

/// The number of queues the kernel creates: one per possible CPU (`num_possible_cpus()`),
/// numbered by CPU id. The ring is used only once every queue has an entry registered.
pub(crate) fn queue_count() -> usize {
    if let Ok(s) = std::fs::read_to_string("/sys/devices/system/cpu/possible") {
        // "0-3" or "0,2-5": the highest id + 1 (ids are dense on the machines this runs on)
        let max = s
            .trim()
            .split(',')
            .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
            .max();
        if let Some(m) = max {
            return m + 1;
        }
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    if n > 0 { n as usize } else { 1 }
}

/// A zeroed, page-aligned buffer shared with the kernel (it writes requests into it).
struct KernelBuf {
    ptr: *mut u8,
    len: usize,
}

impl KernelBuf {
    fn new(len: usize) -> io::Result<KernelBuf> {
        let layout = Layout::from_size_align(len, 4096).map_err(io::Error::other)?;
        // SAFETY: len > 0 for every caller (header and payload sizes are constants > 0).
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        Ok(KernelBuf { ptr, len })
    }
}

impl Drop for KernelBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align_unchecked(self.len, 4096)) }
    }
}

/// One ring entry: its two buffers and the iovec pair the kernel was given for them. Boxed so
/// the iovecs keep their address while the REGISTER command is in flight.
struct Entry {
    header: KernelBuf,
    payload: KernelBuf,
    iov: [libc::iovec; 2],
}

impl Entry {
    fn new(payload_size: usize) -> io::Result<Box<Entry>> {
        let header = KernelBuf::new(HEADER_SIZE)?;
        let payload = KernelBuf::new(payload_size)?;
        let iov = [
            libc::iovec { iov_base: header.ptr.cast(), iov_len: HEADER_SIZE },
            libc::iovec { iov_base: payload.ptr.cast(), iov_len: payload_size },
        ];
        Ok(Box::new(Entry { header, payload, iov }))
    }

    fn read_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        // SAFETY: off + 4 <= HEADER_SIZE for every caller; the kernel is not writing this
        // entry (it belongs to userspace between a completion and the next commit).
        unsafe { std::ptr::copy_nonoverlapping(self.header.ptr.add(off), b.as_mut_ptr(), 4) };
        u32::from_ne_bytes(b)
    }

    fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        // SAFETY: as in read_u32.
        unsafe { std::ptr::copy_nonoverlapping(self.header.ptr.add(off), b.as_mut_ptr(), 8) };
        u64::from_ne_bytes(b)
    }
}

/// Builds a FUSE uring command SQE: `struct fuse_uring_cmd_req` (flags, commit_id, qid) in the
/// command area; for REGISTER also the iovec pair in `addr`/`len`.
fn command(fd: RawFd, op: u32, qid: u16, commit_id: u64, idx: usize, iov: Option<&[libc::iovec; 2]>) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    let mut b = opcode::UringCmd80::new(types::Fd(fd), op).cmd(cmd);
    if let Some(iov) = iov {
        b = b.addr(Some(iov.as_ptr() as u64));
    }
    let sqe = b.build().user_data(idx as u64);
    match iov {
        None => sqe,
        Some(_) => with_len(sqe, 2),
    }
}

/// Sets the SQE's `len` field (offset 24 of `struct io_uring_sqe`), which the io-uring crate's
/// UringCmd80 builder does not expose: the kernel wants the iovec count there.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is repr(C): a 64-byte io_uring_sqe followed by 64 command bytes.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: same layout, and any byte pattern is a valid SQE value.
    unsafe { std::mem::transmute(raw) }
}

/// FUSE_READ or FUSE_WRITE of at least 256 KiB (`size` at offset 16 of both op structs): a
/// streaming reader's readahead, or a bulk writer's write-back.
fn is_long_io(e: &Entry) -> bool {
    const FUSE_READ: u32 = 15;
    const FUSE_WRITE: u32 = 16;
    matches!(e.read_u32(4), FUSE_READ | FUSE_WRITE) && e.read_u32(OP_IN + 16) >= 256 << 10
}

/// Pinned: on the queue's CPU at SCHED_IDLE, for round trips (see `run_queue`). Unpinned: on
/// any CPU at normal priority, for a stream of long READs. Those all arrive on the reader's
/// CPU; served there, the daemon's copy of each reply into the page cache and the reader's copy
/// out of it take turns on one CPU while the other idles (a cold 1 GiB read: 0.96 s pinned,
/// 0.76 s unpinned, 0.78 s through passthrough_hp over /dev/fuse; docs/benchmarks.md).
fn set_placement(qid: usize, pinned: bool) {
    // SAFETY: cpu_set_t is plain data; the calls only read it and the sched_param.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if pinned {
            libc::CPU_SET(qid, &mut set);
        } else {
            for c in 0..queue_count() {
                libc::CPU_SET(c, &mut set);
            }
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            debug!("fuse-uring queue {qid}: affinity: {}", io::Error::last_os_error());
        }
        let p = libc::sched_param { sched_priority: 0 };
        let policy = if pinned { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
        if libc::sched_setscheduler(0, policy, &p) != 0 {
            debug!("fuse-uring queue {qid}: policy: {}", io::Error::last_os_error());
        }
    }
}

/// Where a request's reply goes: the entry's own buffers, while the request is being served.
#[derive(Debug, Clone)]
pub(crate) struct RingReply {
    slot: Arc<Mutex<ReplySlot>>,
    /// `/dev/fuse`, for what is not a reply (backing-file ioctls).
    pub(crate) channel: ChannelSender,
}

#[derive(Debug)]
struct ReplySlot {
    header: *mut u8,
    payload: *mut u8,
    payload_cap: usize,
    state: SlotState,
}

#[derive(Debug, PartialEq)]
enum SlotState {
    Waiting,
    Replied,
    /// Dispatch returned without a reply; the entry has moved on.
    Closed,
}

// SAFETY: the pointers are only written through while the state is Waiting, under the mutex,
// and the state leaves Waiting before the ring thread re-arms the entry or frees its buffers.
unsafe impl Send for ReplySlot {}

impl RingReply {
    /// Writes a reply (`fuse_out_header` then the body) into the entry's buffers.
    pub(crate) fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.state != SlotState::Waiting {
            return Err(io::Error::other("FUSE reply after its io_uring entry moved on (reply before returning)"));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total < OUT_HEADER || total - OUT_HEADER > slot.payload_cap {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("FUSE reply of {total} bytes")));
        }
        let mut at = 0usize;
        for b in bufs {
            let mut src: &[u8] = b;
            while !src.is_empty() {
                let (dst, room) = if at < OUT_HEADER {
                    // SAFETY: at < OUT_HEADER <= HEADER_SIZE
                    (unsafe { slot.header.add(at) }, OUT_HEADER - at)
                } else {
                    // SAFETY: at - OUT_HEADER < total - OUT_HEADER <= payload_cap
                    (unsafe { slot.payload.add(at - OUT_HEADER) }, usize::MAX)
                };
                let n = src.len().min(room);
                // SAFETY: bounds checked above; the buffers do not overlap `src` (requests are
                // served from the thread's own copy).
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
                src = &src[n..];
                at += n;
            }
        }
        let body = ((total - OUT_HEADER) as u32).to_ne_bytes();
        // SAFETY: ENT_PAYLOAD_SZ + 4 <= HEADER_SIZE
        unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), slot.header.add(ENT_PAYLOAD_SZ), 4) };
        slot.state = SlotState::Replied;
        Ok(())
    }
}

impl RingReply {
    /// scion's patch: a data reply of `len` bytes that `fill` writes straight into the entry's
    /// payload buffer. None: the reply does not fit (the caller sends it the usual way).
    pub(crate) fn send_filled(
        &self,
        unique: u64,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), crate::Errno>,
    ) -> Option<io::Result<Result<(), crate::Errno>>> {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.state != SlotState::Waiting {
            return Some(Err(io::Error::other("FUSE reply after its io_uring entry moved on (reply before returning)")));
        }
        if len > slot.payload_cap {
            return None;
        }
        // SAFETY: the payload buffer holds payload_cap >= len bytes, stays allocated while the
        // slot is Waiting (we hold its lock), and the kernel does not touch it until the entry
        // is committed; the request was copied out of it before dispatch.
        let buf = unsafe { std::slice::from_raw_parts_mut(slot.payload, len) };
        if let Err(e) = fill(buf) {
            return Some(Ok(Err(e)));
        }
        let mut h = [0u8; OUT_HEADER];
        h[0..4].copy_from_slice(&((OUT_HEADER + len) as u32).to_ne_bytes());
        // error 0 in h[4..8]
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        let body = (len as u32).to_ne_bytes();
        // SAFETY: OUT_HEADER <= HEADER_SIZE and ENT_PAYLOAD_SZ + 4 <= HEADER_SIZE
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), slot.header, OUT_HEADER);
            std::ptr::copy_nonoverlapping(body.as_ptr(), slot.header.add(ENT_PAYLOAD_SZ), 4);
        }
        slot.state = SlotState::Replied;
        Some(Ok(Ok(())))
    }
}

/// Serves queue `qid` with ring `ring_no` until the connection ends. Runs on its own thread,
/// pinned to CPU `qid`; the kernel hands the queue's requests to whichever ring has a free entry.
pub(crate) fn run_queue<FS: Filesystem>(
    qid: usize,
    ring_no: usize,
    fd: RawFd,
    params: RingParams,
    se: SessionEventLoop<FS>,
) -> io::Result<()> {
    set_placement(qid, true);
    // SCHED_IDLE: a CPU whose only running task is SCHED_IDLE counts as idle when the kernel
    // places a woken task. The reply to a caller is sent from this thread, on the caller's CPU;
    // at normal priority that CPU looks busy and the caller is woken on the other CPU instead,
    // so it ping-pongs between CPUs and every round trip pays a cross-CPU wake-up (measured on
    // a 2-vCPU VM untarring 23,715 files: 227k migrations, 12.7 s; with SCHED_IDLE 3.7 s,
    // /dev/fuse 8.6-9.8 s). Any normal task preempts this thread, the woken caller first,
    // and keeps it waiting while it runs: so the daemon runs its own long work without the
    // engine lock (a checkpoint's write-out and pack sync) at SCHED_IDLE too.
    let depth = params.depth as usize;
    // The thread that created the ring is the only one to submit to it, and completions are
    // reaped only when it waits (DEFER_TASKRUN): the kernel copies requests in this thread.
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = match IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(2 * params.depth)
    {
        Ok(r) => r,
        Err(_) => IoUring::builder().build(2 * params.depth)?,
    };
    // The kernel writes requests into these buffers until it has handed each entry back with
    // an error. If this function returns before that (an io_uring error), they are leaked on
    // purpose: freeing them could let the kernel write into reused memory.
    let entries = std::mem::ManuallyDrop::new(
        (0..depth).map(|_| Entry::new(params.payload_size)).collect::<io::Result<Vec<_>>>()?,
    );
    for (i, e) in entries.iter().enumerate() {
        let sqe = command(fd, CMD_REGISTER, qid as u16, 0, i, Some(&e.iov));
        // SAFETY: the iovecs and the buffers they name live in `entries` until every entry has
        // completed for the last time (or for ever, see above).
        unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("io_uring submission queue full"))?;
    }
    // A page-aligned buffer for the classic layout of one request (header, op struct,
    // payload), laid out so that the payload starts at PAYLOAD_AT (see `serve`).
    let req_buf = KernelBuf::new(PAYLOAD_AT + params.payload_size)?;
    let mut live = depth;
    let mut served = 0u64;
    let mut streaming = false;
    let mut done: Vec<(usize, i32)> = Vec::with_capacity(depth);
    while live > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(ring.completion().map(|c| (c.user_data() as usize, c.result())));
        for &(i, res) in &done {
            if res < 0 {
                // The kernel hands an entry back with an error at unmount (ENOTCONN), when the
                // daemon goes away (ECANCELED) or when it refuses the ring (EOPNOTSUPP: the
                // enable_uring module parameter is off); the entry is then dead.
                live -= 1;
                let e = io::Error::from_raw_os_error(-res);
                match -res {
                    libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => debug!("fuse-uring queue {qid} entry {i}: {e}"),
                    _ => warn!("fuse-uring queue {qid} entry {i}: {e}; requests fall back to /dev/fuse"),
                }
                continue;
            }
            let e = &entries[i];
            let commit_id = e.read_u64(ENT_COMMIT_ID);
            // A thread switches placement when the kind of work changes, not per request.
            let long = is_long_io(e);
            if long != streaming {
                set_placement(qid, !long);
                streaming = long;
            }
            // SAFETY: req_buf is this thread's alone and lives until the loop ends.
            serve(e, unsafe { std::slice::from_raw_parts_mut(req_buf.ptr, req_buf.len) }, params.payload_size, &se);
            served += 1;
            let sqe = command(fd, CMD_COMMIT_AND_FETCH, qid as u16, commit_id, i, None);
            // SAFETY: a commit carries no buffer address; the entry's buffers stay in `entries`.
            unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
    }
    log::info!("fuse-uring queue {qid} ring {ring_no}: {served} requests served");
    // Every entry is dead: the kernel holds none of the buffers any more.
    drop(std::mem::ManuallyDrop::into_inner(entries));
    Ok(())
}

/// Reassembles the request in entry `e` into `buf`, dispatches it and leaves the reply in the
/// entry's buffers (an EIO reply if the filesystem gave none or the request was malformed).
fn serve<FS: Filesystem>(e: &Entry, buf: &mut [u8], payload_cap: usize, se: &SessionEventLoop<FS>) {
    let len = e.read_u32(0) as usize;
    let unique = e.read_u64(8);
    let payload_sz = e.read_u32(ENT_PAYLOAD_SZ) as usize;
    let slot = Arc::new(Mutex::new(ReplySlot {
        header: e.header.ptr,
        payload: e.payload.ptr,
        payload_cap,
        state: SlotState::Waiting,
    }));
    let reply = RingReply { slot: slot.clone(), channel: se.ch.sender() };
    // in_header.len counts the header, the op struct and the payload, as on /dev/fuse.
    let op = len.checked_sub(IN_HEADER + payload_sz);
    match op {
        Some(op) if op <= OP_IN_MAX && payload_sz <= payload_cap => {
            // The payload (a WRITE's data) is put at the page boundary PAYLOAD_AT, so the
            // filesystem gets page-aligned data it can hand to O_DIRECT writes as it is; the
            // header and op struct go just before it when that keeps them 8-byte aligned
            // (op structs are multiples of 8 bytes), else at the start.
            let start = if (IN_HEADER + op) % 8 == 0 { PAYLOAD_AT - IN_HEADER - op } else { 0 };
            assert!(start + len <= buf.len());
            // SAFETY: the entry belongs to userspace now; sizes checked against both buffers.
            unsafe {
                let to = buf.as_mut_ptr().add(start);
                std::ptr::copy_nonoverlapping(e.header.ptr, to, IN_HEADER);
                std::ptr::copy_nonoverlapping(e.header.ptr.add(OP_IN), to.add(IN_HEADER), op);
                std::ptr::copy_nonoverlapping(e.payload.ptr, to.add(IN_HEADER + op), payload_sz);
            }
            match RequestWithSender::new_to(ReplyTo::Ring(reply.clone()), &buf[start..start + len]) {
                Some(req) => {
                    if let Ok(ll::Operation::Destroy(_)) = req.request.operation() {
                        req.reply::<ReplyEmpty>().ok();
                    } else {
                        // A panicking handler must not take the queue thread with it: the
                        // entries it holds would never be committed and every later request
                        // from this CPU would wait for ever. The request gets EIO below.
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| req.dispatch(se)));
                        if r.is_err() {
                            error!("fuse-uring: request {unique} panicked in the filesystem");
                        }
                    }
                }
                None => error!("fuse-uring: unparsable request (opcode {})", e.read_u32(4)),
            }
        }
        _ => error!("fuse-uring: request of {len} bytes with a payload of {payload_sz}"),
    }
    let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
    if s.state == SlotState::Waiting {
        s.state = SlotState::Closed;
        drop(s);
        warn!("fuse-uring: request {unique} got no reply before dispatch returned; answering EIO");
        let mut h = [0u8; OUT_HEADER];
        h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        // SAFETY: the header buffer is HEADER_SIZE bytes; nothing else writes it now.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), e.header.ptr, OUT_HEADER);
            std::ptr::write_bytes(e.header.ptr.add(ENT_PAYLOAD_SZ), 0, 4);
        }
    } else {
        s.state = SlotState::Closed;
    }
}
