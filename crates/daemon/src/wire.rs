//! The control protocol between `scion` commands and a mounted store's daemon, version 5
//! (version 3 added the schedule operations and the scheduled mark of a listing's rows;
//! version 4 the scan operations and part frames; version 5 compression of old versions and
//! the stored size of a listing's rows; versions 6 and 7 are in `docs/format.md`; version 8
//! the pins of a scan's reply; version 12 `scion serve nfs` and the status's NFS line;
//! version 13 the NFS server's bound on held inodes; version 14 a scan's listing streamed:
//! its pins first, its parts as the walk finds them, counts in its reply).
//! Decoded without trusting the other side: every length is checked against what remains
//! (`scion_store::codec::Reader`), and a frame is at most `MAX_MESSAGE` bytes.
//!
//! A connection carries one request and its reply. Both are sequences of frames, `len u32
//! (LE)` then the body. The request is one frame: `magic "SCNC", version u8, the device of
//! the mount it is meant for (u32 length + bytes, empty for any), op` (below).
//! The reply is any number of progress frames, then one final frame, a reply or a failure;
//! so an operation may stream as long as it likes, the limit applying to each frame:
//!
//! ```text
//! progress  0x10  done u64, total u64 (0: unknown), what (u32 len + bytes)
//! reply     0x11  the typed reply (below)
//! failure   0x12  errno u32, message (u32 len + bytes)
//! part      0x13  what u8, count u32, items: some of the items of the reply that follows
//! ```
//!
//! A reply with more items than a frame holds (a diff's changes, a scan's files) sends them
//! in part frames (`Part`), which the receiver gathers (`Parts`) and puts in the reply.
//!
//! Version 1 (before issue 17) answered with a status byte, 0 or 1, and a text: a body that
//! begins with either is an older daemon's, and is reported as such.

use crate::control::{Failure, Op, Reply, SendDedup, Step, Target, MAX_HASHES_PER_REQUEST};
use crate::scan_cache::{ScanResult, MAX_COMMAND};
use scion_fs::diff::{Change, Difference};
use scion_fs::scan::ContentKey;
use scion_fs::treehash::ChunkChange;
use scion_fs::records::{mirrors, schedules};
use scion_fs::repack::RepackReport;
use scion_fs::restore::RestoreReport;
use scion_fs::schedule::ScheduleRow;
use scion_fs::scrub::ScrubReport;
use scion_fs::versions::{Deleted, Version};
use scion_fs::{Kind, Listing, NsKind, Ts};
use scion_store::codec::{Reader, Writer};
use std::io::{Read, Write};

pub const MAGIC: &[u8; 4] = b"SCNC";
pub const VERSION: u8 = 18;
/// Largest frame, either way.
pub const MAX_MESSAGE: usize = 1 << 20;
/// Most names in an excluded path, and most excluded paths.
const MAX_FIELDS: usize = 4096;

const PROGRESS: u8 = 0x10;
const REPLY: u8 = 0x11;
const FAILURE: u8 = 0x12;
const PART: u8 = 0x13;
/// Most items a reply gathers from its parts.
const MAX_ITEMS: usize = 1 << 24;

pub fn write_frame(s: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    if body.len() > MAX_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("message of {} bytes exceeds {MAX_MESSAGE}", body.len()),
        ));
    }
    s.write_all(&(body.len() as u32).to_le_bytes())?;
    s.write_all(body)
}

pub fn read_frame(s: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut b = Vec::new();
    read_frame_into(s, &mut b)?;
    Ok(b)
}

/// `read_frame` into `b` (a buffer kept from message to message: fresh memory costs its
/// zeroing).
pub fn read_frame_into(s: &mut impl Read, b: &mut Vec<u8>) -> std::io::Result<()> {
    let mut l = [0u8; 4];
    s.read_exact(&mut l)?;
    let len = u32::from_le_bytes(l) as usize;
    if len > MAX_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("message of {len} bytes exceeds {MAX_MESSAGE}"),
        ));
    }
    b.clear();
    b.resize(len, 0);
    s.read_exact(b)
}

fn put_hashes(w: &mut Writer, hashes: &[[u8; 32]]) {
    assert!(hashes.len() <= MAX_HASHES_PER_REQUEST, "{} hashes in one request", hashes.len());
    w.u32(hashes.len() as u32);
    for h in hashes {
        w.raw(h);
    }
}

fn get_hashes(r: &mut Reader) -> Result<Vec<[u8; 32]>, String> {
    let n = r.count(32).map_err(bad)?;
    if n > MAX_HASHES_PER_REQUEST {
        return Err(format!("{n} hashes in one request (at most {MAX_HASHES_PER_REQUEST})"));
    }
    (0..n).map(|_| r.array().map_err(bad)).collect()
}

fn step_code(s: Step) -> u8 {
    match s {
        Step::Begin => 0,
        Step::Finish => 1,
        Step::Abandon => 2,
    }
}

fn step_of(b: u8) -> Result<Step, String> {
    Ok(match b {
        0 => Step::Begin,
        1 => Step::Finish,
        2 => Step::Abandon,
        b => return Err(format!("step {b} (0 begin, 1 finish, 2 abandon)")),
    })
}

fn bad(e: scion_store::Error) -> String {
    e.to_string()
}

// ----- requests ---------------------------------------------------------------------------

/// A request for `op`, to the daemon of the mount whose device is `device` (`major:minor`
/// as in the mount table; empty: whichever daemon listens). A daemon serving another mount
/// refuses it: any FUSE filesystem can claim a store's name in the mount table.
pub fn encode_request(op: &Op, device: &str) -> Vec<u8> {
    encode(op, device, false)
}

/// A request for `op` that the daemon runs only if no file is open below the directories
/// it reads (`control::settle_dirs`, which must name some), checked with the engine's set of
/// open files before it runs; else it refuses with EBUSY, having done nothing. So the CLI
/// asks once where it would ask for the open files first (`Op::OpenBelow`) and then for the
/// operation: in the common case, nothing open, one round trip instead of two (issue 38
/// item 3). Since version 18; root's and the owner's only, as `Op::OpenBelow` is.
pub fn encode_settled_request(op: &Op, device: &str) -> Vec<u8> {
    assert!(!crate::control::settle_dirs(op).is_empty(), "a settled request of an operation that reads no directory");
    encode(op, device, true)
}

/// A decoded request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    /// The mount's device it is meant for (`encode_request`; empty: any).
    pub device: String,
    /// Only if nothing is open below the operation's directories (`encode_settled_request`).
    pub settled: bool,
}

/// The prefix of a settled request's operation.
const SETTLED: u8 = 49;

fn encode(op: &Op, device: &str, settled: bool) -> Vec<u8> {
    let mut w = Writer::new();
    w.raw(MAGIC).u8(VERSION).bytes(device.as_bytes());
    if settled {
        w.u8(SETTLED);
    }
    match op {
        Op::Clone { src, dst, excludes } => {
            w.u8(1).bytes(src).bytes(dst).u32(excludes.len() as u32);
            for e in excludes {
                w.u32(e.len() as u32);
                for n in e {
                    w.bytes(n);
                }
            }
        }
        Op::Snapshot { path, name } => {
            w.u8(2).bytes(path).bytes(name);
        }
        Op::Destroy { target: Target::Path(p), recursive } => {
            w.u8(3).bytes(p).u8(*recursive as u8);
        }
        Op::Destroy { target: Target::Id(id), recursive } => {
            w.u8(4).u32(*id).u8(*recursive as u8);
        }
        Op::List { under } => {
            w.u8(5)
                .u8(under.is_some() as u8)
                .bytes(under.as_deref().unwrap_or_default());
        }
        Op::Scrub => {
            w.u8(6);
        }
        Op::Repack { path, budget } => {
            w.u8(7).bytes(path).u64(*budget);
        }
        Op::Compress { budget, level } => {
            w.u8(23).u64(*budget).u8(*level);
        }
        Op::MirrorSet { dir, target, keep_unmirrored } => {
            w.u8(24).bytes(dir).bytes(target).u8(*keep_unmirrored as u8);
        }
        Op::MirrorRemove { dir, target } => {
            w.u8(25).bytes(dir).u8(target.is_some() as u8).bytes(target.as_deref().unwrap_or_default());
        }
        Op::MirrorStatus => {
            w.u8(26);
        }
        Op::RemoteAdd(r) => {
            w.u8(40);
            encode_remote(&mut w, r);
        }
        Op::RemoteRemove { name } => {
            w.u8(41).bytes(name.as_bytes());
        }
        Op::RemoteList => {
            w.u8(42);
        }
        Op::Push { snap, remote, name } => {
            w.u8(43).bytes(snap).bytes(remote.as_bytes()).bytes(name.as_bytes());
        }
        Op::PullOpen { remote, name, version, tmp, pid } => {
            w.u8(44).bytes(remote.as_bytes()).bytes(name.as_bytes()).u8(version.is_some() as u8).u64(version.unwrap_or(0));
            w.bytes(tmp).u32(*pid);
        }
        Op::PullDone { tmp } => {
            w.u8(47).bytes(tmp);
        }
        Op::Prefetch { attach } => {
            w.u8(45).u32(*attach);
        }
        Op::RemoteGc { remote, grace_s, dry } => {
            w.u8(46).bytes(remote.as_bytes()).u64(*grace_s).u8(*dry as u8);
        }
        Op::Status => {
            w.u8(27);
        }
        Op::CubeCreate { path, mode, on_error } => {
            w.u8(28).bytes(path).bytes(mode.as_bytes()).bytes(on_error.as_bytes());
        }
        Op::CubeSet { path, mode, on_error } => {
            w.u8(29).bytes(path).bytes(mode.as_bytes()).bytes(on_error.as_bytes());
        }
        Op::CubeList => {
            w.u8(30);
        }
        Op::CubeRecover { path } => {
            w.u8(31).bytes(path);
        }
        Op::CubeCheck { path } => {
            w.u8(32).bytes(path);
        }
        Op::CubeRemove { path } => {
            w.u8(33).bytes(path);
        }
        Op::CubeConvert { hidden, target, mode, on_error, pid, step } => {
            w.u8(36).bytes(hidden).bytes(target).bytes(mode.as_bytes()).bytes(on_error.as_bytes());
            w.u32(*pid).u8(step_code(*step));
        }
        Op::CubeUncube { path, tmp, pid, step } => {
            w.u8(37).bytes(path).bytes(tmp).u32(*pid).u8(step_code(*step));
        }
        Op::ScheduleSet(s) => {
            w.u8(8).bytes(&schedules::encode_payload(std::slice::from_ref(s)));
        }
        Op::ScheduleRemove { dir } => {
            w.u8(9).bytes(dir);
        }
        Op::ScheduleList => {
            w.u8(10);
        }
        Op::Versions { path } => {
            w.u8(11).bytes(path);
        }
        Op::Deleted { dir } => {
            w.u8(12).bytes(dir);
        }
        Op::Restore {
            path,
            from,
            to,
            replace,
        } => {
            w.u8(13).bytes(path).bytes(from).u8(to.is_some() as u8);
            w.bytes(to.as_deref().unwrap_or_default()).u8(*replace as u8);
        }
        Op::Rollback { dir, to } => {
            w.u8(14).bytes(dir).bytes(to);
        }
        Op::Diff {
            a,
            b,
            times,
            recursive,
            no_renames,
        } => {
            let flags = *times as u8 | (*recursive as u8) << 1 | (*no_renames as u8) << 2;
            w.u8(15).bytes(a).bytes(b).u8(flags);
        }
        Op::Scan { paths, since, command } => {
            w.u8(16).u32(paths.len() as u32);
            for p in paths {
                w.bytes(p);
            }
            w.u8(since.is_some() as u8).bytes(since.as_deref().unwrap_or_default());
            w.u8(command.is_some() as u8).bytes(command.as_deref().unwrap_or_default());
        }
        Op::ScanRecord { command, results } => {
            w.u8(17).bytes(command).u32(results.len() as u32);
            for x in results {
                x.encode(&mut w);
            }
        }
        Op::TreeHash { path } => {
            w.u8(18).bytes(path);
        }
        Op::FindTree { hash, hint } => {
            w.u8(19).raw(hash).bytes(hint);
        }
        Op::ChunkChanges { old, new } => {
            w.u8(20).bytes(old).bytes(new);
        }
        Op::Send { snap, base, resume, dedup } => {
            w.u8(22).bytes(snap).u8(base.is_some() as u8).bytes(base.as_deref().unwrap_or_default());
            let (from, chain) = resume.unwrap_or_default();
            w.u8(resume.is_some() as u8).u64(from).raw(&chain);
            match dedup {
                SendDedup::Off => {
                    w.u8(0);
                }
                SendDedup::Offer => {
                    w.u8(1);
                }
                SendDedup::Use(h) => {
                    w.u8(2);
                    put_hashes(&mut w, h);
                }
            }
        }
        Op::FindBlocks { hashes } => {
            w.u8(34);
            put_hashes(&mut w, hashes);
        }
        Op::Checkpoint { path } => {
            w.u8(35).bytes(path);
        }
        Op::OpenBelow { path } => {
            w.u8(48).bytes(path);
        }
        Op::ReadOnly { on } => {
            w.u8(38).u8(*on as u8);
        }
        Op::Nfs(crate::control::NfsRequest::Stop) => {
            w.u8(39).u8(0);
        }
        Op::Nfs(crate::control::NfsRequest::Start(n)) => {
            w.u8(39).u8(1).bytes(n.listen.as_bytes()).bytes(n.squash.as_bytes()).u32(n.anon_uid).u32(n.anon_gid);
            for list in [&n.exports, &n.read_only] {
                w.u32(list.len() as u32);
                for p in list {
                    w.bytes(p);
                }
            }
            w.u32(n.max_held);
        }
        Op::Apply { top, base, open, frames, attach } => {
            w.u8(21).bytes(top).u8(base.is_some() as u8).bytes(base.as_deref().unwrap_or_default());
            w.u8(open.is_some() as u8).bytes(open.as_deref().unwrap_or_default()).bytes(frames);
            w.u8(attach.is_some() as u8).u32(attach.unwrap_or(0));
        }
    }
    w.finish()
}

/// A request; an error names what is wrong.
pub fn decode_request(b: &[u8]) -> Result<Request, String> {
    let mut r = Reader::new(b, "control request");
    if r.raw(4).map_err(bad)? != MAGIC {
        return Err("not a scion control request".into());
    }
    let v = r.u8().map_err(bad)?;
    if v != VERSION {
        return Err(format!(
            "control protocol version {v} is not supported (this daemon speaks {VERSION}); use the scion that mounted the store"
        ));
    }
    let device = text(r.bytes().map_err(bad)?);
    let mut code = r.u8().map_err(bad)?;
    let settled = code == SETTLED;
    if settled {
        code = r.u8().map_err(bad)?;
    }
    let op = match code {
        1 => {
            let src = r.bytes().map_err(bad)?.to_vec();
            let dst = r.bytes().map_err(bad)?.to_vec();
            let n = r.count(4).map_err(bad)?;
            if n > MAX_FIELDS {
                return Err(format!("{n} excluded paths, more than {MAX_FIELDS}"));
            }
            let mut excludes = Vec::with_capacity(n);
            for _ in 0..n {
                let m = r.count(4).map_err(bad)?;
                if m > MAX_FIELDS {
                    return Err(format!("an excluded path of {m} names, more than {MAX_FIELDS}"));
                }
                let mut names = Vec::with_capacity(m);
                for _ in 0..m {
                    names.push(r.bytes().map_err(bad)?.to_vec());
                }
                excludes.push(names);
            }
            Op::Clone { src, dst, excludes }
        }
        2 => Op::Snapshot {
            path: r.bytes().map_err(bad)?.to_vec(),
            name: r.bytes().map_err(bad)?.to_vec(),
        },
        3 => Op::Destroy {
            target: Target::Path(r.bytes().map_err(bad)?.to_vec()),
            recursive: r.u8().map_err(bad)? != 0,
        },
        4 => Op::Destroy {
            target: Target::Id(r.u32().map_err(bad)?),
            recursive: r.u8().map_err(bad)? != 0,
        },
        5 => {
            let has = r.u8().map_err(bad)?;
            let p = r.bytes().map_err(bad)?.to_vec();
            Op::List {
                under: (has != 0).then_some(p),
            }
        }
        6 => Op::Scrub,
        7 => Op::Repack {
            path: r.bytes().map_err(bad)?.to_vec(),
            budget: r.u64().map_err(bad)?,
        },
        23 => Op::Compress {
            budget: r.u64().map_err(bad)?,
            level: r.u8().map_err(bad)?,
        },
        24 => Op::MirrorSet {
            dir: r.bytes().map_err(bad)?.to_vec(),
            target: r.bytes().map_err(bad)?.to_vec(),
            keep_unmirrored: r.u8().map_err(bad)? != 0,
        },
        25 => {
            let dir = r.bytes().map_err(bad)?.to_vec();
            let has = r.u8().map_err(bad)? != 0;
            let target = r.bytes().map_err(bad)?.to_vec();
            Op::MirrorRemove {
                dir,
                target: has.then_some(target),
            }
        }
        26 => Op::MirrorStatus,
        27 => Op::Status,
        28 | 29 => {
            let path = r.bytes().map_err(bad)?.to_vec();
            let mode = text(r.bytes().map_err(bad)?);
            let on_error = text(r.bytes().map_err(bad)?);
            if code == 28 {
                Op::CubeCreate { path, mode, on_error }
            } else {
                Op::CubeSet { path, mode, on_error }
            }
        }
        30 => Op::CubeList,
        31 => Op::CubeRecover { path: r.bytes().map_err(bad)?.to_vec() },
        32 => Op::CubeCheck { path: r.bytes().map_err(bad)?.to_vec() },
        33 => Op::CubeRemove { path: r.bytes().map_err(bad)?.to_vec() },
        36 => {
            let hidden = r.bytes().map_err(bad)?.to_vec();
            let target = r.bytes().map_err(bad)?.to_vec();
            let mode = text(r.bytes().map_err(bad)?);
            let on_error = text(r.bytes().map_err(bad)?);
            let pid = r.u32().map_err(bad)?;
            let step = step_of(r.u8().map_err(bad)?)?;
            Op::CubeConvert { hidden, target, mode, on_error, pid, step }
        }
        37 => {
            let path = r.bytes().map_err(bad)?.to_vec();
            let tmp = r.bytes().map_err(bad)?.to_vec();
            let pid = r.u32().map_err(bad)?;
            let step = step_of(r.u8().map_err(bad)?)?;
            Op::CubeUncube { path, tmp, pid, step }
        }
        8 => match schedules::decode_payload(r.bytes().map_err(bad)?)
            .map_err(bad)?
            .as_slice()
        {
            [s] => Op::ScheduleSet(s.clone()),
            l => return Err(format!("a schedule request names {} schedules, not one", l.len())),
        },
        9 => Op::ScheduleRemove {
            dir: r.bytes().map_err(bad)?.to_vec(),
        },
        10 => Op::ScheduleList,
        11 => Op::Versions {
            path: r.bytes().map_err(bad)?.to_vec(),
        },
        12 => Op::Deleted {
            dir: r.bytes().map_err(bad)?.to_vec(),
        },
        13 => {
            let path = r.bytes().map_err(bad)?.to_vec();
            let from = r.bytes().map_err(bad)?.to_vec();
            let has_to = r.u8().map_err(bad)? != 0;
            let to = r.bytes().map_err(bad)?.to_vec();
            Op::Restore {
                path,
                from,
                to: has_to.then_some(to),
                replace: r.u8().map_err(bad)? != 0,
            }
        }
        14 => Op::Rollback {
            dir: r.bytes().map_err(bad)?.to_vec(),
            to: r.bytes().map_err(bad)?.to_vec(),
        },
        15 => {
            let (a, b) = (r.bytes().map_err(bad)?.to_vec(), r.bytes().map_err(bad)?.to_vec());
            let flags = r.u8().map_err(bad)?;
            if flags > 7 {
                return Err(format!("diff flags {flags:#x}"));
            }
            Op::Diff {
                a,
                b,
                times: flags & 1 != 0,
                recursive: flags & 2 != 0,
                no_renames: flags & 4 != 0,
            }
        }
        16 => {
            let n = r.count(4).map_err(bad)?;
            if n == 0 || n > MAX_FIELDS {
                return Err(format!("a scan of {n} paths (1 to {MAX_FIELDS})"));
            }
            let mut paths = Vec::with_capacity(n);
            for _ in 0..n {
                paths.push(r.bytes().map_err(bad)?.to_vec());
            }
            let has_since = r.u8().map_err(bad)? != 0;
            let since = r.bytes().map_err(bad)?.to_vec();
            let has_command = r.u8().map_err(bad)? != 0;
            let command = r.bytes().map_err(bad)?.to_vec();
            if command.len() > MAX_COMMAND {
                return Err(format!("a command line of {} bytes (at most {MAX_COMMAND})", command.len()));
            }
            Op::Scan {
                paths,
                since: has_since.then_some(since),
                command: has_command.then_some(command),
            }
        }
        17 => {
            let command = r.bytes().map_err(bad)?.to_vec();
            if command.len() > MAX_COMMAND {
                return Err(format!("a command line of {} bytes (at most {MAX_COMMAND})", command.len()));
            }
            let n = r.count(32 + 4 + 12).map_err(bad)?;
            let mut results = Vec::with_capacity(n);
            for _ in 0..n {
                results.push(ScanResult::decode(&mut r).map_err(bad)?);
            }
            Op::ScanRecord { command, results }
        }
        18 => Op::TreeHash {
            path: r.bytes().map_err(bad)?.to_vec(),
        },
        19 => Op::FindTree {
            hash: r.array().map_err(bad)?,
            hint: r.bytes().map_err(bad)?.to_vec(),
        },
        20 => Op::ChunkChanges {
            old: r.bytes().map_err(bad)?.to_vec(),
            new: r.bytes().map_err(bad)?.to_vec(),
        },
        22 => {
            let snap = r.bytes().map_err(bad)?.to_vec();
            let has_base = r.u8().map_err(bad)? != 0;
            let base = r.bytes().map_err(bad)?.to_vec();
            let has_resume = r.u8().map_err(bad)? != 0;
            let from = r.u64().map_err(bad)?;
            let chain: [u8; 32] = r.array().map_err(bad)?;
            let dedup = match r.u8().map_err(bad)? {
                0 => SendDedup::Off,
                1 => SendDedup::Offer,
                2 => SendDedup::Use(get_hashes(&mut r)?),
                m => return Err(format!("send dedup mode {m}")),
            };
            Op::Send {
                snap,
                base: has_base.then_some(base),
                resume: has_resume.then_some((from, chain)),
                dedup,
            }
        }
        34 => Op::FindBlocks { hashes: get_hashes(&mut r)? },
        40 => Op::RemoteAdd(decode_remote(&mut r)?),
        41 => Op::RemoteRemove { name: utf8(r.bytes().map_err(bad)?)? },
        42 => Op::RemoteList,
        43 => Op::Push { snap: r.bytes().map_err(bad)?.to_vec(), remote: utf8(r.bytes().map_err(bad)?)?, name: utf8(r.bytes().map_err(bad)?)? },
        44 => {
            let (remote, name) = (utf8(r.bytes().map_err(bad)?)?, utf8(r.bytes().map_err(bad)?)?);
            let has = r.u8().map_err(bad)? != 0;
            let v = r.u64().map_err(bad)?;
            let tmp = r.bytes().map_err(bad)?.to_vec();
            Op::PullOpen { remote, name, version: has.then_some(v), tmp, pid: r.u32().map_err(bad)? }
        }
        47 => Op::PullDone { tmp: r.bytes().map_err(bad)?.to_vec() },
        45 => Op::Prefetch { attach: r.u32().map_err(bad)? },
        46 => Op::RemoteGc { remote: utf8(r.bytes().map_err(bad)?)?, grace_s: r.u64().map_err(bad)?, dry: r.u8().map_err(bad)? != 0 },
        35 => Op::Checkpoint { path: r.bytes().map_err(bad)?.to_vec() },
        48 => Op::OpenBelow { path: r.bytes().map_err(bad)?.to_vec() },
        38 => Op::ReadOnly { on: r.u8().map_err(bad)? != 0 },
        39 => match r.u8().map_err(bad)? {
            0 => Op::Nfs(crate::control::NfsRequest::Stop),
            1 => {
                let listen = text(r.bytes().map_err(bad)?);
                let squash = text(r.bytes().map_err(bad)?);
                let (anon_uid, anon_gid) = (r.u32().map_err(bad)?, r.u32().map_err(bad)?);
                let mut lists = [Vec::new(), Vec::new()];
                for list in lists.iter_mut() {
                    let n = r.count(4).map_err(bad)?;
                    if n > MAX_FIELDS {
                        return Err(format!("{n} directories to serve over NFS: at most {MAX_FIELDS}"));
                    }
                    for _ in 0..n {
                        list.push(r.bytes().map_err(bad)?.to_vec());
                    }
                }
                let [exports, read_only] = lists;
                let max_held = r.u32().map_err(bad)?;
                let spec = crate::control::NfsSpec { listen, exports, read_only, squash, anon_uid, anon_gid, max_held };
                Op::Nfs(crate::control::NfsRequest::Start(spec))
            }
            k => return Err(format!("unknown NFS request {k}")),
        },
        21 => {
            let top = r.bytes().map_err(bad)?.to_vec();
            let has_base = r.u8().map_err(bad)? != 0;
            let base = r.bytes().map_err(bad)?.to_vec();
            let has_open = r.u8().map_err(bad)? != 0;
            let open = r.bytes().map_err(bad)?.to_vec();
            let frames = r.bytes().map_err(bad)?.to_vec();
            let has_attach = r.u8().map_err(bad)? != 0;
            let attach = r.u32().map_err(bad)?;
            Op::Apply {
                top,
                base: has_base.then_some(base),
                open: has_open.then_some(open),
                frames,
                attach: has_attach.then_some(attach),
            }
        }
        o => return Err(format!("unknown operation {o}")),
    };
    r.expect_end().map_err(bad)?;
    if settled && crate::control::settle_dirs(&op).is_empty() {
        return Err(format!("operation {code} reads no directory: it cannot be asked settled"));
    }
    Ok(Request { op, device, settled })
}

// ----- replies ----------------------------------------------------------------------------

/// A frame of a reply stream.
#[derive(Debug)]
pub enum Frame {
    Progress { done: u64, total: u64, what: String },
    Reply(Reply),
    Failure(Failure),
    Part(Part),
    /// The end of a reply whose items came in parts: how many of each.
    Gathered(Gathered),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Gathered {
    /// Changes.
    Diff(u64),
}

/// Some of the items of the reply that follows.
#[derive(Debug, PartialEq, Eq)]
pub enum Part {
    /// Changes of a diff found by its walk, in walk order.
    Diff(Vec<Difference>),
    /// Changes of a diff held for rename pairing, in walk order, after every `Diff` part
    /// (version 15; `scion_fs::diff::Run`).
    DiffHeld(Vec<Difference>),
    ScanContents(Vec<(ContentKey, u64)>),
    ScanFiles(Vec<(Vec<u8>, u32)>),
    ScanDenied(Vec<Vec<u8>>),
    ScanCached(Vec<ScanResult>),
    /// The snapshots a scan reads its directories from: (directory, pin) (version 14).
    ScanPins(Vec<(Vec<u8>, Vec<u8>)>),
    /// Bytes of a send stream, for the caller's sink (never gathered).
    Stream(Vec<u8>),
}

impl Part {
    /// A scan's part (never gathered: the caller takes them as they come, `call_parts`).
    pub fn is_scan(&self) -> bool {
        matches!(self, Part::ScanContents(_) | Part::ScanFiles(_) | Part::ScanDenied(_) | Part::ScanCached(_) | Part::ScanPins(_))
    }
}

/// The parts of a reply gathered so far.
#[derive(Default)]
pub struct Parts {
    diff: Vec<Difference>,
    held: Vec<Difference>,
}

impl Parts {
    pub fn add(&mut self, p: Part) -> Result<(), String> {
        let n = match p {
            Part::Diff(v) if self.held.is_empty() => extend(&mut self.diff, v),
            Part::Diff(_) => return Err("a diff's walk went on after its held changes".into()),
            Part::DiffHeld(v) => extend(&mut self.held, v) + self.diff.len(),
            Part::Stream(_) => return Err("stream bytes where none were asked for".into()),
            p => return Err(format!("a scan's part where none was asked for ({} items)", p.len())),
        };
        if n > MAX_ITEMS {
            return Err(format!("a reply of more than {MAX_ITEMS} items"));
        }
        Ok(())
    }

    /// The reply its parts make, checked against the counts its end gives.
    pub fn complete(self, end: Gathered) -> Result<Reply, String> {
        Ok(match end {
            Gathered::Diff(n) => {
                let got = self.diff.len() + self.held.len();
                if n != got as u64 {
                    return Err(format!("the reply announces {n} changes, its parts held {got}"));
                }
                let merged = scion_fs::diff::Merged::new(self.diff.into_iter(), self.held.into_iter());
                Reply::Diff(merged.collect())
            }
        })
    }
}

impl Part {
    fn len(&self) -> usize {
        match self {
            Part::Diff(v) | Part::DiffHeld(v) => v.len(),
            Part::ScanContents(v) => v.len(),
            Part::ScanFiles(v) => v.len(),
            Part::ScanDenied(v) => v.len(),
            Part::ScanCached(v) => v.len(),
            Part::ScanPins(v) => v.len(),
            Part::Stream(_) => 1,
        }
    }
}

fn extend<T>(to: &mut Vec<T>, v: Vec<T>) -> usize {
    to.extend(v);
    to.len()
}

/// The frames of a reply: its parts, then the reply itself.
pub fn encode_reply_frames(reply: &Reply) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    match reply {
        Reply::Diff(changes) => part_frames(&mut frames, 1, changes, encode_change),
        _ => {}
    }
    frames.push(encode_reply(reply));
    frames
}

/// The frames of a diff's batch of changes of run `run` (none for no changes), which go to
/// the caller as the walk finds them, before the diff's end (`Reply::DiffCount`).
pub fn encode_diff_part(run: scion_fs::diff::Run, changes: &[Difference]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let what = match run {
        scion_fs::diff::Run::Walk => 1,
        scion_fs::diff::Run::Held => 8,
    };
    part_frames(&mut frames, what, changes, encode_change);
    frames
}

/// The frames of a scan's part (as many as its items need; none for no items), which go
/// to the caller as the walk finds them, before the scan's reply.
pub fn encode_scan_part(part: &Part) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    match part {
        Part::ScanContents(v) => part_frames(&mut frames, 2, v, |w, (k, size)| {
            w.raw(k).u64(*size);
        }),
        Part::ScanFiles(v) => part_frames(&mut frames, 3, v, |w, (p, k)| {
            w.u32(*k).bytes(p);
        }),
        Part::ScanDenied(v) => part_frames(&mut frames, 4, v, |w, p| {
            w.bytes(p);
        }),
        Part::ScanCached(v) => part_frames(&mut frames, 5, v, |w, x| x.encode(w)),
        Part::ScanPins(v) => {
            // (Sent even when empty: the caller waits for it before it runs anything.)
            let mut w = Writer::new();
            w.u8(PART).u8(7).u32(v.len() as u32);
            for (dir, pin) in v {
                w.bytes(dir).bytes(pin);
            }
            frames.push(w.finish());
        }
        p => panic!("not a scan's part: {p:?}"),
    }
    frames
}

/// A part frame of send-stream bytes (at most `MAX_MESSAGE - 64` of them).
pub fn encode_stream_part(bytes: &[u8]) -> Vec<u8> {
    [&stream_part_head(bytes.len())[..], bytes].concat()
}

/// A stream part's message before its bytes: part kind 6, one piece of `n` bytes (as
/// `Writer::u8(PART).u8(6).u32(1).bytes(..)` lays it out).
fn stream_part_head(n: usize) -> [u8; 10] {
    let mut h = [PART, 6, 0, 0, 0, 0, 0, 0, 0, 0];
    h[2..6].copy_from_slice(&1u32.to_le_bytes());
    h[6..].copy_from_slice(&(n as u32).to_le_bytes());
    h
}

/// `write_frame` of `encode_stream_part(bytes)`, without copying the bytes into a message.
pub fn write_stream_part(s: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    let len = bytes.len() + 10;
    if len > MAX_MESSAGE {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("message of {len} bytes exceeds {MAX_MESSAGE}")));
    }
    s.write_all(&[&(len as u32).to_le_bytes()[..], &stream_part_head(bytes.len())].concat())?;
    s.write_all(bytes)
}

/// The bytes of a reply message that is a stream part (`encode_stream_part`), borrowed; None
/// for any other message (`decode_frame` reads those).
pub fn stream_part(b: &[u8]) -> Option<&[u8]> {
    let (head, rest) = b.split_at_checked(10)?;
    (head == stream_part_head(rest.len())).then_some(rest)
}

/// Part frames of kind `what` holding `items`, as many as they need.
fn part_frames<T>(frames: &mut Vec<Vec<u8>>, what: u8, items: &[T], enc: impl Fn(&mut Writer, &T)) {
    let mut body = Writer::new();
    let mut n = 0u32;
    let flush = |frames: &mut Vec<Vec<u8>>, body: Writer, n: u32| {
        let mut w = Writer::new();
        w.u8(PART).u8(what).u32(n).raw(&body.finish());
        frames.push(w.finish());
    };
    for it in items {
        let mut one = Writer::new();
        enc(&mut one, it);
        let one = one.finish();
        if n > 0 && body.buf.len() + one.len() > MAX_MESSAGE - 64 {
            flush(frames, std::mem::replace(&mut body, Writer::new()), n);
            n = 0;
        }
        body.raw(&one);
        n += 1;
    }
    if n > 0 {
        flush(frames, body, n);
    }
}

/// A check report's counts, in their order on the wire.
fn check_counts(r: &scion_fs::check::Report) -> [u64; 22] {
    [
        r.generation, r.namespaces, r.dirs, r.files, r.symlinks, r.specials, r.hardlinked, r.file_bytes, r.blocks, r.block_bytes,
        r.shared_blocks, r.patched_chunks, r.patch_bytes, r.page_summed_chunks, r.inline_files, r.inline_bytes,
        r.direct_files, r.relocated_blocks, r.relocated_bytes, r.journal_records, r.unnamed_tail_bytes, r.remote_blocks,
    ]
}

fn encode_cube(w: &mut Writer, c: &crate::cubes::CubeRow) {
    w.u32(c.id).bytes(&c.path).bytes(c.mode.as_bytes()).bytes(c.on_error.as_bytes());
    w.bytes(c.state.as_bytes()).bytes(c.why.as_bytes()).u64(c.used);
}

fn decode_cube(r: &mut Reader) -> Result<crate::cubes::CubeRow, String> {
    Ok(crate::cubes::CubeRow {
        id: r.u32().map_err(bad)?,
        path: r.bytes().map_err(bad)?.to_vec(),
        mode: text(r.bytes().map_err(bad)?),
        on_error: text(r.bytes().map_err(bad)?),
        state: text(r.bytes().map_err(bad)?),
        why: text(r.bytes().map_err(bad)?),
        used: r.u64().map_err(bad)?,
    })
}

/// One change as the wire carries it (and a caller's spool keeps it).
pub fn encode_change(w: &mut Writer, d: &Difference) {
    w.u8(d.change as u8).u8(d.kind as u8).u64(d.old_size).u64(d.new_size).bytes(&d.path);
    w.bytes(d.old_path.as_deref().unwrap_or_default());
}

pub fn decode_change(r: &mut Reader) -> Result<Difference, String> {
    let change = change_of(r.u8().map_err(bad)?)?;
    let kind = kind_of(r.u8().map_err(bad)?)?;
    Ok(Difference {
        change,
        kind,
        old_size: r.u64().map_err(bad)?,
        new_size: r.u64().map_err(bad)?,
        path: r.bytes().map_err(bad)?.to_vec(),
        old_path: Some(r.bytes().map_err(bad)?.to_vec()).filter(|_| change == Change::Renamed),
    })
}

fn decode_part(r: &mut Reader) -> Result<Part, String> {
    let what = r.u8().map_err(bad)?;
    let n = r.count(4).map_err(bad)?;
    fn items<T>(n: usize, mut f: impl FnMut() -> Result<T, String>) -> Result<Vec<T>, String> {
        (0..n).map(|_| f()).collect()
    }
    Ok(match what {
        1 => Part::Diff(items(n, || decode_change(r))?),
        8 => Part::DiffHeld(items(n, || decode_change(r))?),
        2 => Part::ScanContents(items(n, || Ok((r.array().map_err(bad)?, r.u64().map_err(bad)?)))?),
        3 => Part::ScanFiles(items(n, || {
            let k = r.u32().map_err(bad)?;
            Ok((r.bytes().map_err(bad)?.to_vec(), k))
        })?),
        4 => Part::ScanDenied(items(n, || Ok(r.bytes().map_err(bad)?.to_vec()))?),
        5 => Part::ScanCached(items(n, || ScanResult::decode(r).map_err(bad))?),
        7 => {
            if n > MAX_FIELDS {
                return Err(format!("{n} pins in a scan (at most {MAX_FIELDS})"));
            }
            Part::ScanPins(items(n, || Ok((r.bytes().map_err(bad)?.to_vec(), r.bytes().map_err(bad)?.to_vec())))?)
        }
        6 => {
            if n != 1 {
                return Err("a stream part holds one piece".into());
            }
            Part::Stream(r.bytes().map_err(bad)?.to_vec())
        }
        k => return Err(format!("unknown part {k}")),
    })
}

pub fn encode_progress(done: u64, total: u64, what: &str) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(PROGRESS).u64(done).u64(total).bytes(what.as_bytes());
    w.finish()
}

pub fn encode_failure(f: &Failure) -> Vec<u8> {
    let mut w = Writer::new();
    // The message is cut to fit a frame.
    let m = &f.message.as_bytes()[..f.message.len().min(MAX_MESSAGE - 64)];
    w.u8(FAILURE).u32(f.errno as u32).bytes(m);
    w.finish()
}

/// A reply frame. A listing or damage list too long for one frame is cut, and says so. The
/// items of a diff or scan are not in it but in the part frames before it
/// (`encode_reply_frames`); it gives their counts.
pub fn encode_reply(reply: &Reply) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(REPLY);
    match reply {
        Reply::Cloned => {
            w.u8(1);
        }
        Reply::Snapshotted => {
            w.u8(2);
        }
        Reply::Destroyed => {
            w.u8(3);
        }
        Reply::Listing(rows) => {
            let mut body = Writer::new();
            let mut n = 0u32;
            for l in rows {
                let mut row = Writer::new();
                row.u32(l.ns)
                    .u8(l.kind as u8)
                    .u8(l.scheduled as u8)
                    .u8(l.path.is_some() as u8 | (l.orphaned as u8) << 1);
                row.bytes(l.path.as_deref().unwrap_or_default()).bytes(&l.origin);
                l.created.encode(&mut row);
                row.u64(l.referenced).u64(l.exclusive).u64(l.stored);
                let row = row.finish();
                if body.buf.len() + row.len() > MAX_MESSAGE - 64 {
                    break;
                }
                body.raw(&row);
                n += 1;
            }
            w.u8(4).u32(n).raw(&body.finish());
        }
        Reply::Scrubbed(s) => {
            w.u8(5).u64(s.blocks).u64(s.bytes).u64(s.damaged_total);
            let mut body = Writer::new();
            let mut n = 0u32;
            for (p, e) in &s.damage {
                if body.buf.len() + p.len() + e.len() + 8 > MAX_MESSAGE - 64 {
                    break;
                }
                body.bytes(p.as_bytes()).bytes(e.as_bytes());
                n += 1;
            }
            w.u32(n).raw(&body.finish());
        }
        Reply::MirrorSet => {
            w.u8(23);
        }
        Reply::Cube(row) => {
            w.u8(27);
            encode_cube(&mut w, row);
        }
        Reply::Cubes(rows) => {
            w.u8(28).u32(rows.len() as u32);
            for row in rows {
                encode_cube(&mut w, row);
            }
        }
        Reply::Checked(rep) => {
            w.u8(29);
            for v in check_counts(rep) {
                w.u64(v);
            }
            w.u8(rep.journal_tail.is_some() as u8).bytes(rep.journal_tail.as_deref().unwrap_or_default().as_bytes());
            let mut n = 0u32;
            let mut body = Writer::new();
            for p in &rep.problems {
                if body.buf.len() + p.len() + 4 > MAX_MESSAGE / 2 {
                    break;
                }
                body.bytes(p.as_bytes());
                n += 1;
            }
            w.u32(n).raw(&body.finish());
            // Since version 8: what crashes left (a few short lines, bounded).
            let left: Vec<&String> = rep.leftovers.iter().take(64).collect();
            w.u32(left.len() as u32);
            for l in left {
                w.bytes(&l.as_bytes()[..l.len().min(4096)]);
            }
            w.u64(rep.unreferenced_bytes);
        }
        Reply::Status(st) => {
            let f = &st.facts;
            w.u8(26).bytes(&st.store).u32(st.pid);
            for v in [
                st.uptime_s, st.host_total, st.host_free, st.clones, st.snapshots, st.snapshots_only,
                st.mirrors_failing, st.orphaned, st.orphaned_bytes, f.generation, f.checkpoint_age_s, f.journal_bytes, f.dirty_bytes,
                f.unpunched_blocks, f.compressed_blocks, f.compressed_bytes, f.pack_bytes, f.schedules, f.mirrors,
            ] {
                w.u64(v);
            }
            for v in [f.repack_age_s, f.compress_age_s] {
                w.u8(v.is_some() as u8).u64(v.unwrap_or(0));
            }
            w.u8(f.failed.is_some() as u8).bytes(f.failed.as_deref().unwrap_or_default().as_bytes());
            // Since version 8.
            w.u8(f.host_full as u8);
            // Since version 10.
            let b = &f.written;
            for v in [b.user, b.data, b.journal, b.meta, b.repack, b.compress] {
                w.u64(v);
            }
            // Since version 11.
            let m = &f.memory;
            for v in [
                st.rss_bytes, st.listings, st.listing_bytes, m.inodes, m.kernel_inodes, m.inode_bytes, m.node_cache_bytes,
                m.node_cache_limit, m.hash_memo_entries, m.hash_memo_limit,
            ] {
                w.u64(v);
            }
            // Since version 12.
            w.bytes(st.nfs.as_bytes());
            // Since version 14.
            w.u64(m.whereabouts_entries).u64(m.whereabouts_limit);
            // Since version 16.
            w.u8(st.remote.is_some() as u8);
            let r = st.remote.clone().unwrap_or_default();
            w.u64(r.fetches).u64(r.fetched_bytes).u64(r.failures).bytes(r.failing.as_bytes()).u64(r.failing_since).u64(r.cache_bytes).u64(r.cache_limit);
            // Since version 17.
            let l = &f.lock;
            w.u64(l.holds);
            for v in l.held.iter().chain(&l.waited) {
                w.u64(*v);
            }
            w.u64(l.longest_wait_us).u32(l.longest.len() as u32);
            for h in &l.longest {
                w.u64(h.us).bytes(h.at.as_bytes()).u64(h.ended_s);
            }
        }
        Reply::MirrorRemoved(n) => {
            w.u8(24).u32(*n);
        }
        Reply::Mirrors(rows) => {
            w.u8(25).u32(rows.len() as u32);
            for row in rows {
                w.bytes(&mirrors::encode_payload(std::slice::from_ref(&row.mirror)))
                    .u32(row.behind)
                    .u8(row.next.is_some() as u8)
                    .bytes(row.next.as_deref().unwrap_or_default())
                    .bytes(row.state.as_bytes());
            }
        }
        Reply::Compressed(r) => {
            w.u8(22)
                .u64(r.candidates)
                .u64(r.compressed)
                .u64(r.bytes_before)
                .u64(r.bytes_after)
                .u64(r.incompressible)
                .u64(r.left);
        }
        Reply::Repacked(r) => {
            w.u8(6)
                .u64(r.files)
                .u64(r.contiguous)
                .u64(r.shared)
                .u64(r.busy)
                .u64(r.moved_files)
                .u64(r.moved_bytes)
                .u8(r.budget_reached as u8);
        }
        Reply::ScheduleSet => {
            w.u8(7);
        }
        Reply::ScheduleRemoved(had) => {
            w.u8(8).u8(*had as u8);
        }
        Reply::Schedules(rows) => {
            // At most `MAX_SCHEDULES` rows of a few hundred bytes: one frame.
            w.u8(9).u32(rows.len() as u32);
            for row in rows {
                w.bytes(&schedules::encode_payload(std::slice::from_ref(&row.schedule)));
                for t in [row.last_run, row.next_run] {
                    w.u8(t.is_some() as u8).i64(t.unwrap_or(0));
                }
                w.u64(row.kept as u64);
            }
        }
        Reply::Versions(vs) => {
            let mut body = Writer::new();
            let mut n = 0u32;
            for v in vs {
                let mut row = Writer::new();
                row.u8(v.live as u8).u8(v.kind as u8).u64(v.size);
                v.mtime.encode(&mut row);
                v.seen.encode(&mut row);
                row.u32(v.snapshots.len() as u32);
                for s in &v.snapshots {
                    row.bytes(s);
                }
                let row = row.finish();
                if body.buf.len() + row.len() > MAX_MESSAGE - 64 {
                    break;
                }
                body.raw(&row);
                n += 1;
            }
            w.u8(10).u32(n).raw(&body.finish());
        }
        Reply::Deleted(ds) => {
            let mut body = Writer::new();
            let mut n = 0u32;
            for d in ds {
                if body.buf.len() + d.path.len() + d.snapshot.len() + 9 > MAX_MESSAGE - 64 {
                    break;
                }
                body.u8(d.kind as u8).bytes(&d.path).bytes(&d.snapshot);
                n += 1;
            }
            w.u8(11).u32(n).raw(&body.finish());
        }
        Reply::Restored(x) => {
            w.u8(12).u64(x.files).u64(x.dirs).u64(x.others).u64(x.bytes);
            w.u8(x.kept_as.is_some() as u8)
                .bytes(x.kept_as.as_deref().unwrap_or_default());
        }
        Reply::RolledBack => {
            w.u8(13);
        }
        Reply::Diff(changes) => {
            w.u8(14).u64(changes.len() as u64);
        }
        Reply::DiffCount(n) => {
            w.u8(14).u64(*n);
        }
        Reply::Scanned(n) => {
            w.u8(15).u64(n.contents).u64(n.files).u64(n.denied).u64(n.cached);
        }
        Reply::ScanRecorded => {
            w.u8(16);
        }
        Reply::TreeHash(h) => {
            w.u8(17).raw(h);
        }
        Reply::Found(paths) => {
            w.u8(18).u32(paths.len() as u32);
            for p in paths {
                w.bytes(p);
            }
        }
        Reply::Applied => {
            w.u8(20);
        }
        Reply::RemoteAdded => {
            w.u8(33);
        }
        Reply::RemoteRemoved => {
            w.u8(34);
        }
        Reply::Pushed(p) => {
            let s = &p.stats;
            w.u8(36).u64(p.version).raw(&p.root).raw(&p.tree);
            w.u64(s.blocks).u64(s.new_blocks).u64(s.new_bytes).u64(s.sent_bytes).u64(s.objects).u64(s.known_packs).u64(s.done_bytes);
        }
        Reply::PullOpened { attach, version, root, blocks } => {
            w.u8(37).u32(*attach).u64(*version).raw(root).u64(*blocks);
        }
        Reply::Prefetched(n) => {
            w.u8(38).u64(*n);
        }
        Reply::PullDone => {
            w.u8(40);
        }
        Reply::RemoteGc(g) => {
            w.u8(39).u64(g.manifests).u64(g.trees).u64(g.packs).u64(g.removed).u64(g.removed_bytes).u64(g.young).u64(g.pushes);
        }
        Reply::Remotes(list) => {
            w.u8(35).u32(list.len() as u32);
            for remote in list {
                encode_remote(&mut w, remote);
            }
        }
        Reply::OpenBelow(files) => {
            w.u8(41).u32(files.len() as u32);
            for f in files {
                w.bytes(f);
            }
        }
        Reply::Checkpointed => {
            w.u8(31);
        }
        Reply::Nfs(t) => {
            w.u8(32).bytes(t.as_bytes());
        }
        Reply::Sent(h) => {
            w.u8(21).raw(h);
        }
        Reply::Blocks(held) => {
            w.u8(30).u32(held.len() as u32);
            for h in held {
                w.u8(u8::from(*h));
            }
        }
        Reply::ChunkChanges(changes) => {
            w.u8(19).u32(changes.len() as u32);
            for c in changes {
                match c {
                    ChunkChange::Data(i) => {
                        w.u8(0).u64(*i);
                    }
                    ChunkChange::Hole(i) => {
                        w.u8(1).u64(*i);
                    }
                    ChunkChange::Patch(i, runs) => {
                        w.u8(2).u64(*i).u32(runs.len() as u32);
                        for (o, d) in runs {
                            w.u32(*o).bytes(d);
                        }
                    }
                }
            }
        }
    }
    w.finish()
}

fn change_of(c: u8) -> Result<scion_fs::diff::Change, String> {
    use scion_fs::diff::Change;
    [Change::Added, Change::Deleted, Change::Modified, Change::Metadata, Change::Type, Change::Renamed]
        .into_iter()
        .find(|x| *x as u8 == c)
        .ok_or_else(|| format!("unknown change {c}"))
}

fn kind_of(k: u8) -> Result<Kind, String> {
    Kind::from_u8(k).ok_or_else(|| format!("unknown file kind {k}"))
}

/// A remote's fields (name, bucket, prefix, endpoint, region), each as bytes.
fn encode_remote(w: &mut Writer, r: &scion_fs::records::remotes::Remote) {
    for f in [&r.name, &r.bucket, &r.prefix, &r.endpoint, &r.region] {
        w.bytes(f.as_bytes());
    }
}

/// A remote as `encode_remote` writes it, checked as the remotes file checks it.
fn decode_remote(r: &mut Reader) -> Result<scion_fs::records::remotes::Remote, String> {
    let mut f = || -> Result<String, String> { utf8(r.bytes().map_err(bad)?) };
    let remote = scion_fs::records::remotes::Remote { name: f()?, bucket: f()?, prefix: f()?, endpoint: f()?, region: f()? };
    remote.check()?;
    Ok(remote)
}

fn utf8(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "a text field that is not UTF-8".to_string())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The engine lock's report in a status reply (since version 17); at most 64 long holds.
fn decode_lock_report(r: &mut Reader) -> Result<scion_fs::LockReport, String> {
    let mut l = scion_fs::LockReport { holds: r.u64().map_err(bad)?, ..Default::default() };
    for v in l.held.iter_mut().chain(l.waited.iter_mut()) {
        *v = r.u64().map_err(bad)?;
    }
    l.longest_wait_us = r.u64().map_err(bad)?;
    let n = r.u32().map_err(bad)?;
    if n > 64 {
        return Err(format!("a status reply with {n} long holds of the engine lock (at most 64)"));
    }
    for _ in 0..n {
        let us = r.u64().map_err(bad)?;
        let at = text(r.bytes().map_err(bad)?);
        let ended_s = r.u64().map_err(bad)?;
        l.longest.push(scion_fs::LongHold { us, at, ended_s });
    }
    Ok(l)
}

/// A frame of a reply stream; an error says what is wrong with it.
pub fn decode_frame(b: &[u8]) -> Result<Frame, String> {
    let mut r = Reader::new(b, "control reply");
    let kind = r.u8().map_err(bad)?;
    let f = match kind {
        0 | 1 => {
            return Err(format!(
                "the daemon runs an older scion (control protocol 1), which said: {}; unmount and mount the store again with this one",
                text(&b[1..])
            ))
        }
        PART => Frame::Part(decode_part(&mut r)?),
        PROGRESS => Frame::Progress {
            done: r.u64().map_err(bad)?,
            total: r.u64().map_err(bad)?,
            what: text(r.bytes().map_err(bad)?),
        },
        FAILURE => Frame::Failure(Failure::new(r.u32().map_err(bad)? as i32, text(r.bytes().map_err(bad)?))),
        REPLY => Frame::Reply(match r.u8().map_err(bad)? {
            1 => Reply::Cloned,
            2 => Reply::Snapshotted,
            3 => Reply::Destroyed,
            4 => {
                let n = r.count(4 + 1 + 1 + 1 + 4 + 4 + 12 + 16).map_err(bad)?;
                let mut rows = Vec::with_capacity(n);
                for _ in 0..n {
                    let ns = r.u32().map_err(bad)?;
                    let kind = match r.u8().map_err(bad)? {
                        0 => NsKind::Main,
                        1 => NsKind::Clone,
                        2 => NsKind::Snapshot,
                        k => return Err(format!("unknown namespace kind {k}")),
                    };
                    let scheduled = r.u8().map_err(bad)? != 0;
                    let flags = r.u8().map_err(bad)?;
                    let has_path = flags & 1 != 0;
                    let path = r.bytes().map_err(bad)?.to_vec();
                    let origin = r.bytes().map_err(bad)?.to_vec();
                    let created = Ts::decode(&mut r).map_err(bad)?;
                    rows.push(Listing {
                        ns,
                        kind,
                        path: has_path.then_some(path),
                        origin,
                        created,
                        referenced: r.u64().map_err(bad)?,
                        exclusive: r.u64().map_err(bad)?,
                        stored: r.u64().map_err(bad)?,
                        scheduled,
                        orphaned: flags & 2 != 0,
                    });
                }
                Reply::Listing(rows)
            }
            5 => {
                let mut s = ScrubReport {
                    blocks: r.u64().map_err(bad)?,
                    bytes: r.u64().map_err(bad)?,
                    damaged_total: r.u64().map_err(bad)?,
                    damage: Vec::new(),
                };
                let n = r.count(8).map_err(bad)?;
                for _ in 0..n {
                    let p = text(r.bytes().map_err(bad)?);
                    let e = text(r.bytes().map_err(bad)?);
                    s.damage.push((p, e));
                }
                Reply::Scrubbed(s)
            }
            23 => Reply::MirrorSet,
            27 => Reply::Cube(decode_cube(&mut r)?),
            28 => {
                let n = r.count(4 + 4 * 5 + 8).map_err(bad)?;
                Reply::Cubes((0..n).map(|_| decode_cube(&mut r)).collect::<Result<_, _>>()?)
            }
            29 => {
                let mut v = [0u64; 22];
                for x in v.iter_mut() {
                    *x = r.u64().map_err(bad)?;
                }
                let has = r.u8().map_err(bad)? != 0;
                let tail = text(r.bytes().map_err(bad)?);
                let n = r.count(4).map_err(bad)?;
                let problems = (0..n).map(|_| r.bytes().map(text).map_err(bad)).collect::<Result<_, _>>()?;
                let k = r.count(4).map_err(bad)?;
                if k > 64 {
                    return Err(format!("{k} leftovers in a check report (at most 64)"));
                }
                let leftovers = (0..k).map(|_| r.bytes().map(text).map_err(bad)).collect::<Result<_, _>>()?;
                let unreferenced_bytes = r.u64().map_err(bad)?;
                let [generation, namespaces, dirs, files, symlinks, specials, hardlinked, file_bytes, blocks, block_bytes, shared_blocks, patched_chunks, patch_bytes, page_summed_chunks, inline_files, inline_bytes, direct_files, relocated_blocks, relocated_bytes, journal_records, unnamed_tail_bytes, remote_blocks] = v;
                Reply::Checked(Box::new(scion_fs::check::Report {
                    generation, namespaces, dirs, files, symlinks, specials, hardlinked, file_bytes, blocks, block_bytes,
                    shared_blocks, patched_chunks, patch_bytes, page_summed_chunks, inline_files, inline_bytes,
                    direct_files, relocated_blocks, relocated_bytes, journal_records, unnamed_tail_bytes, remote_blocks,
                    journal_tail: has.then_some(tail),
                    leftovers,
                    unreferenced_bytes,
                    problems,
                }))
            }
            26 => {
                let store = r.bytes().map_err(bad)?.to_vec();
                let pid = r.u32().map_err(bad)?;
                let mut v = [0u64; 19];
                for x in v.iter_mut() {
                    *x = r.u64().map_err(bad)?;
                }
                let mut ages = [None; 2];
                for a in ages.iter_mut() {
                    let has = r.u8().map_err(bad)? != 0;
                    let x = r.u64().map_err(bad)?;
                    *a = has.then_some(x);
                }
                let has = r.u8().map_err(bad)? != 0;
                let failed = String::from_utf8_lossy(r.bytes().map_err(bad)?).into_owned();
                let host_full = r.u8().map_err(bad)? != 0;
                let mut b = [0u64; 6];
                for x in b.iter_mut() {
                    *x = r.u64().map_err(bad)?;
                }
                let written = scion_fs::status::Written { user: b[0], data: b[1], journal: b[2], meta: b[3], repack: b[4], compress: b[5] };
                let mut m = [0u64; 10];
                for x in m.iter_mut() {
                    *x = r.u64().map_err(bad)?;
                }
                let nfs = text(r.bytes().map_err(bad)?);
                let whereabouts = [r.u64().map_err(bad)?, r.u64().map_err(bad)?];
                let has_remote = r.u8().map_err(bad)? != 0;
                let (fetches, fetched_bytes, failures) = (r.u64().map_err(bad)?, r.u64().map_err(bad)?, r.u64().map_err(bad)?);
                let failing = text(r.bytes().map_err(bad)?);
                let (failing_since, cache_bytes, cache_limit) = (r.u64().map_err(bad)?, r.u64().map_err(bad)?, r.u64().map_err(bad)?);
                let remote = has_remote.then_some(crate::control::RemoteStatus { fetches, fetched_bytes, failures, failing, failing_since, cache_bytes, cache_limit });
                let lock = decode_lock_report(&mut r)?;
                let memory = scion_fs::status::Memory {
                    inodes: m[3],
                    kernel_inodes: m[4],
                    inode_bytes: m[5],
                    node_cache_bytes: m[6],
                    node_cache_limit: m[7],
                    hash_memo_entries: m[8],
                    hash_memo_limit: m[9],
                    whereabouts_entries: whereabouts[0],
                    whereabouts_limit: whereabouts[1],
                };
                let facts = scion_fs::status::StatusFacts {
                    written,
                    memory,
                    lock,
                    generation: v[9],
                    checkpoint_age_s: v[10],
                    journal_bytes: v[11],
                    dirty_bytes: v[12],
                    unpunched_blocks: v[13],
                    compressed_blocks: v[14],
                    compressed_bytes: v[15],
                    pack_bytes: v[16],
                    schedules: v[17],
                    mirrors: v[18],
                    repack_age_s: ages[0],
                    compress_age_s: ages[1],
                    failed: has.then_some(failed),
                    host_full,
                };
                Reply::Status(Box::new(crate::control::Status {
                    facts,
                    store,
                    pid,
                    uptime_s: v[0],
                    host_total: v[1],
                    host_free: v[2],
                    clones: v[3],
                    snapshots: v[4],
                    snapshots_only: v[5],
                    mirrors_failing: v[6],
                    orphaned: v[7],
                    orphaned_bytes: v[8],
                    rss_bytes: m[0],
                    listings: m[1],
                    listing_bytes: m[2],
                    nfs,
                    remote,
                }))
            }
            24 => Reply::MirrorRemoved(r.u32().map_err(bad)?),
            25 => {
                let n = r.count(4 + 4 + 1 + 4 + 4).map_err(bad)?;
                let mut rows = Vec::with_capacity(n);
                for _ in 0..n {
                    let [mirror] = <[_; 1]>::try_from(mirrors::decode_payload(r.bytes().map_err(bad)?).map_err(bad)?)
                        .map_err(|_| "a mirror row holds one mirror".to_string())?;
                    let behind = r.u32().map_err(bad)?;
                    let has = r.u8().map_err(bad)? != 0;
                    let next = r.bytes().map_err(bad)?.to_vec();
                    let state = String::from_utf8_lossy(r.bytes().map_err(bad)?).into_owned();
                    rows.push(crate::control::MirrorRow {
                        mirror,
                        next: has.then_some(next),
                        behind,
                        state,
                    });
                }
                Reply::Mirrors(rows)
            }
            22 => Reply::Compressed(scion_fs::compress::CompressReport {
                candidates: r.u64().map_err(bad)?,
                compressed: r.u64().map_err(bad)?,
                bytes_before: r.u64().map_err(bad)?,
                bytes_after: r.u64().map_err(bad)?,
                incompressible: r.u64().map_err(bad)?,
                left: r.u64().map_err(bad)?,
            }),
            6 => Reply::Repacked(RepackReport {
                files: r.u64().map_err(bad)?,
                contiguous: r.u64().map_err(bad)?,
                shared: r.u64().map_err(bad)?,
                busy: r.u64().map_err(bad)?,
                moved_files: r.u64().map_err(bad)?,
                moved_bytes: r.u64().map_err(bad)?,
                budget_reached: r.u8().map_err(bad)? != 0,
            }),
            7 => Reply::ScheduleSet,
            8 => Reply::ScheduleRemoved(r.u8().map_err(bad)? != 0),
            9 => {
                let n = r.count(4 + 9 + 9 + 8).map_err(bad)?;
                let mut rows = Vec::with_capacity(n);
                for _ in 0..n {
                    let [schedule] = <[_; 1]>::try_from(schedules::decode_payload(r.bytes().map_err(bad)?).map_err(bad)?)
                        .map_err(|l| format!("a schedule row holds {} schedules", l.len()))?;
                    let mut time = || -> Result<Option<i64>, String> {
                        let has = r.u8().map_err(bad)? != 0;
                        let t = r.i64().map_err(bad)?;
                        Ok(has.then_some(t))
                    };
                    let (last_run, next_run) = (time()?, time()?);
                    rows.push(ScheduleRow {
                        schedule,
                        last_run,
                        next_run,
                        kept: r.u64().map_err(bad)? as usize,
                    });
                }
                Reply::Schedules(rows)
            }
            10 => {
                let n = r.count(1 + 1 + 8 + 12 + 12 + 4).map_err(bad)?;
                let mut vs = Vec::with_capacity(n);
                for _ in 0..n {
                    let live = r.u8().map_err(bad)? != 0;
                    let kind = kind_of(r.u8().map_err(bad)?)?;
                    let size = r.u64().map_err(bad)?;
                    let mtime = Ts::decode(&mut r).map_err(bad)?;
                    let seen = Ts::decode(&mut r).map_err(bad)?;
                    let m = r.count(4).map_err(bad)?;
                    let mut snapshots = Vec::with_capacity(m);
                    for _ in 0..m {
                        snapshots.push(r.bytes().map_err(bad)?.to_vec());
                    }
                    vs.push(Version {
                        snapshots,
                        live,
                        kind,
                        size,
                        mtime,
                        seen,
                    });
                }
                Reply::Versions(vs)
            }
            11 => {
                let n = r.count(1 + 4 + 4).map_err(bad)?;
                let mut ds = Vec::with_capacity(n);
                for _ in 0..n {
                    let kind = kind_of(r.u8().map_err(bad)?)?;
                    ds.push(Deleted {
                        kind,
                        path: r.bytes().map_err(bad)?.to_vec(),
                        snapshot: r.bytes().map_err(bad)?.to_vec(),
                    });
                }
                Reply::Deleted(ds)
            }
            12 => {
                let mut x = RestoreReport {
                    files: r.u64().map_err(bad)?,
                    dirs: r.u64().map_err(bad)?,
                    others: r.u64().map_err(bad)?,
                    bytes: r.u64().map_err(bad)?,
                    kept_as: None,
                };
                let has = r.u8().map_err(bad)? != 0;
                let k = r.bytes().map_err(bad)?.to_vec();
                x.kept_as = has.then_some(k);
                Reply::Restored(x)
            }
            13 => Reply::RolledBack,
            // Counts only: the items came in parts.
            14 => {
                let n = r.u64().map_err(bad)?;
                return Ok(Frame::Gathered(Gathered::Diff(n)));
            }
            15 => Reply::Scanned(crate::control::ScanCounts {
                contents: r.u64().map_err(bad)?,
                files: r.u64().map_err(bad)?,
                denied: r.u64().map_err(bad)?,
                cached: r.u64().map_err(bad)?,
            }),
            16 => Reply::ScanRecorded,
            17 => Reply::TreeHash(r.array().map_err(bad)?),
            18 => {
                let n = r.count(4).map_err(bad)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(r.bytes().map_err(bad)?.to_vec());
                }
                Reply::Found(v)
            }
            20 => Reply::Applied,
            31 => Reply::Checkpointed,
            33 => Reply::RemoteAdded,
            34 => Reply::RemoteRemoved,
            36 => {
                let (version, root, tree) = (r.u64().map_err(bad)?, r.array().map_err(bad)?, r.array().map_err(bad)?);
                let mut n = [0u64; 7];
                for x in n.iter_mut() {
                    *x = r.u64().map_err(bad)?;
                }
                let [blocks, new_blocks, new_bytes, sent_bytes, objects, known_packs, done_bytes] = n;
                let stats = scion_remote::push::PushStats { blocks, new_blocks, new_bytes, sent_bytes, objects, known_packs, done_bytes };
                Reply::Pushed(crate::control::PushSummary { version, root, tree, stats })
            }
            37 => Reply::PullOpened { attach: r.u32().map_err(bad)?, version: r.u64().map_err(bad)?, root: r.array().map_err(bad)?, blocks: r.u64().map_err(bad)? },
            38 => Reply::Prefetched(r.u64().map_err(bad)?),
            40 => Reply::PullDone,
            41 => {
                let n = r.u32().map_err(bad)? as usize;
                if n > crate::control::OPEN_BELOW_MAX {
                    return Err(format!("{n} open files named (at most {})", crate::control::OPEN_BELOW_MAX));
                }
                let mut files = Vec::with_capacity(n);
                for _ in 0..n {
                    files.push(r.bytes().map_err(bad)?.to_vec());
                }
                Reply::OpenBelow(files)
            }
            39 => {
                let mut n = [0u64; 7];
                for x in n.iter_mut() {
                    *x = r.u64().map_err(bad)?;
                }
                let [manifests, trees, packs, removed, removed_bytes, young, pushes] = n;
                Reply::RemoteGc(scion_remote::gc::GcReport { manifests, trees, packs, removed, removed_bytes, young, pushes })
            }
            35 => {
                let n = r.count(5 * 4).map_err(bad)?;
                if n > scion_fs::records::remotes::MAX_REMOTES {
                    return Err(format!("{n} remotes"));
                }
                Reply::Remotes((0..n).map(|_| decode_remote(&mut r)).collect::<Result<_, _>>()?)
            }
            32 => Reply::Nfs(text(r.bytes().map_err(bad)?)),
            21 => Reply::Sent(r.array().map_err(bad)?),
            30 => {
                let n = r.count(1).map_err(bad)?;
                Reply::Blocks((0..n).map(|_| r.u8().map(|b| b != 0)).collect::<Result<_, _>>().map_err(bad)?)
            }
            19 => {
                let n = r.count(9).map_err(bad)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let tag = r.u8().map_err(bad)?;
                    let i = r.u64().map_err(bad)?;
                    v.push(match tag {
                        0 => ChunkChange::Data(i),
                        1 => ChunkChange::Hole(i),
                        2 => {
                            let m = r.count(8).map_err(bad)?;
                            let mut runs = Vec::with_capacity(m);
                            for _ in 0..m {
                                let o = r.u32().map_err(bad)?;
                                runs.push((o, r.bytes().map_err(bad)?.to_vec()));
                            }
                            ChunkChange::Patch(i, runs)
                        }
                        t => return Err(format!("unknown chunk change {t}")),
                    });
                }
                Reply::ChunkChanges(v)
            }
            k => return Err(format!("unknown reply {k}")),
        }),
        k => return Err(format!("unknown reply frame {k:#x}")),
    };
    r.expect_end().map_err(bad)?;
    Ok(f)
}
