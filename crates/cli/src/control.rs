//! What the CLI makes of control operations (`scion_daemon::control`): the text each reply
//! prints, and the kernel notifications a daemon sends for them. The operations themselves,
//! their meaning and the protocol live in `scion-daemon`.

use scion_daemon::control::{show, Op, Reply, Target};
use scion_fs::NsKind;
use std::os::unix::ffi::OsStrExt;

pub use scion_daemon::server::socket_path;
pub use scion_fs::Inval as Invalidate;

/// Tells the kernel to forget what changes behind its back made wrong (without the engine
/// lock: the kernel may call back into the daemon meanwhile).
pub fn invalidate(notifier: &fuser::Notifier, inval: &[Invalidate]) {
    for i in inval {
        let r = match i {
            Invalidate::Entry(p, n) => notifier.inval_entry(fuser::INodeNo(*p), std::ffi::OsStr::from_bytes(n)),
            Invalidate::Inode(p) => notifier.inval_inode(fuser::INodeNo(*p), 0, 0),
        };
        // ENOENT: the kernel had already dropped it.
        if let Err(e) = r {
            if e.raw_os_error() != Some(libc::ENOENT) {
                log::debug!("invalidation {i:?}: {e}");
            }
        }
    }
}

/// The text a reply prints; an error (with that text) for a scrub that found damage.
pub fn render(op: &Op, reply: &Reply) -> Result<String, String> {
    Ok(match (op, reply) {
        (Op::Clone { src, dst, .. }, _) => format!("cloned {} to {}", show(src), show(dst)),
        (Op::Snapshot { path, name }, _) => format!(
            "snapshot {} of {} (at {}/.snapshot/{})",
            String::from_utf8_lossy(name),
            show(path),
            show(path).trim_end_matches('/'),
            String::from_utf8_lossy(name)
        ),
        (Op::Destroy(Target::Id(id)), _) => format!("destroyed @{id}"),
        (Op::Destroy(Target::Path(p)), _) => format!("destroyed {}", show(p)),
        (_, Reply::Repacked(r)) => format!(
            "repacked {}: {} files looked at, {} moved ({} MiB), {} already contiguous, {} left (blocks shared with a clone or snapshot), {} left (changes pending, patches or hard links){}",
            match op {
                Op::Repack { path, .. } => show(path),
                _ => String::new(),
            },
            r.files,
            r.moved_files,
            r.moved_bytes >> 20,
            r.contiguous,
            r.shared,
            r.busy,
            if r.budget_reached { "; stopped at the budget" } else { "" }
        ),
        (_, Reply::Scrubbed(rep)) => {
            let text = rep.to_string();
            if rep.damaged_total > 0 {
                return Err(text);
            }
            text
        }
        (_, Reply::Listing(rows)) => {
            let mut out = format!(
                "{:<9} {:>4} {:<40} {:<30} {:>20} {:>12} {:>12}\n",
                "KIND", "ID", "PATH", "ORIGIN", "CREATED (UTC)", "REFER", "USED"
            );
            for l in rows {
                let kind = match l.kind {
                    NsKind::Clone => "clone",
                    NsKind::Snapshot => "snapshot",
                    NsKind::Main => "main",
                };
                let path = l.path.as_ref().map(|p| show(p)).unwrap_or_else(|| "(directory gone)".into());
                out += &format!(
                    "{:<9} {:>4} {:<40} {:<30} {:>20} {:>12} {:>12}\n",
                    kind,
                    l.ns,
                    path,
                    String::from_utf8_lossy(&l.origin),
                    utc(l.created.sec),
                    human(l.referenced),
                    human(l.exclusive)
                );
            }
            out
        }
        (_, r) => format!("{r:?}"),
    })
}

/// Seconds since the epoch as UTC, formatted as `fmt` does with
/// (year, month, day, hour, minute, second).
pub fn utc_with(sec: i64, fmt: fn(i32, i32, i32, i32, i32, i32) -> String) -> String {
    let t = sec as libc::time_t;
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::gmtime_r(&t, &mut tm) }.is_null() {
        return sec.to_string();
    }
    fmt(
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
    )
}

fn utc(sec: i64) -> String {
    utc_with(sec, |y, mo, d, h, mi, s| {
        format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
    })
}

pub fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}
