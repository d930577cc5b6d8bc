//! What the CLI makes of control operations (`scion_daemon::control`): the text each reply
//! prints, and the kernel notifications a daemon sends for them. The operations themselves,
//! their meaning and the protocol live in `scion-daemon`.

use scion_daemon::control::{show, Op, Reply, Target};
use scion_fs::NsKind;
use std::os::unix::ffi::OsStrExt;

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
        (Op::Clone { src, dst, .. }, _) => scion::client::cloned(src, dst),
        (Op::Snapshot { path, name }, _) => scion::client::snapshotted(path, name),
        (Op::Destroy { target: Target::Id(id), .. }, _) => format!("destroyed @{id}"),
        (Op::Destroy { target: Target::Path(p), .. }, _) => format!("destroyed {}", show(p)),
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
        (_, Reply::Listing(rows)) => listing_table(rows, false, false),
        (_, r) => format!("{r:?}"),
    })
}

/// `scion list` as a table: one row per line and nothing else, so `awk`/`cut` scripts can
/// read it; a snapshot's CLONES counts the clones made from it (`--json` names them); STORED
/// is REFER as it lies in the packs, after compression of old versions. `scripted` (-H): no
/// header, fields separated by one tab; `exact` (-p): bytes and times (seconds since the
/// epoch) as exact numbers.
pub fn listing_table(rows: &[scion_fs::Listing], scripted: bool, exact: bool) -> String {
    let size = |b: u64| if exact { b.to_string() } else { human(b) };
    let mut lines: Vec<[String; 9]> = Vec::new();
    if !scripted {
        lines.push(["KIND", "ID", "PATH", "ORIGIN", "CREATED (UTC)", "REFER", "USED", "STORED", "CLONES"].map(String::from));
    }
    for l in rows {
        let clones = match l.kind {
            NsKind::Snapshot => clones_of(rows, l).len().to_string(),
            _ => "-".into(),
        };
        lines.push([
            kind_name(l).to_string(),
            l.ns.to_string(),
            match (&l.path, l.orphaned) {
                (Some(p), false) => show(p),
                (Some(p), true) => format!("{} (directory gone)", show(p)),
                (None, _) => "(directory gone)".into(),
            },
            String::from_utf8_lossy(&l.origin).into_owned(),
            if exact { l.created.sec.to_string() } else { utc(l.created.sec) },
            size(l.referenced),
            size(l.exclusive),
            size(l.stored),
            clones,
        ]);
    }
    let mut out = String::new();
    for f in lines {
        if scripted {
            out += &f.join("\t");
        } else {
            out += &format!(
                // (ID: 7 digits hold a cube's ids, from 4194304 on.)
                "{:<9} {:>7} {:<40} {:<30} {:>20} {:>12} {:>12} {:>12} {:>6}",
                f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]
            );
        }
        out.push('\n');
    }
    out
}

/// The clones made from snapshot `l` (their origin is its path). A clone shares its origin's
/// blocks by reference and does not depend on it: destroying the snapshot leaves them whole.
pub fn clones_of<'a>(rows: &'a [scion_fs::Listing], l: &scion_fs::Listing) -> Vec<&'a scion_fs::Listing> {
    let Some(p) = l.path.as_ref().filter(|_| l.kind == NsKind::Snapshot) else { return Vec::new() };
    let p = show(p);
    rows.iter().filter(|c| c.kind == NsKind::Clone && String::from_utf8_lossy(&c.origin) == p).collect()
}

/// A listing row's kind as `list` prints it: a scheduled snapshot says so.
fn kind_name(l: &scion_fs::Listing) -> &'static str {
    match l.kind {
        NsKind::Clone => "clone",
        NsKind::Snapshot if l.scheduled => "scheduled",
        NsKind::Snapshot => "snapshot",
        NsKind::Main => "main",
    }
}

/// `scion check --json`: the report as one object.
pub fn check_json(r: &scion_fs::check::Report) -> serde_json::Value {
    serde_json::json!({
        "clean": r.is_clean(),
        "generation": r.generation,
        "namespaces": r.namespaces,
        "dirs": r.dirs,
        "files": r.files,
        "symlinks": r.symlinks,
        "specials": r.specials,
        "hardlinked": r.hardlinked,
        "file_bytes": r.file_bytes,
        "blocks": r.blocks,
        "block_bytes": r.block_bytes,
        "shared_blocks": r.shared_blocks,
        "patched_chunks": r.patched_chunks,
        "patch_bytes": r.patch_bytes,
        "inline_files": r.inline_files,
        "inline_bytes": r.inline_bytes,
        "compressed_blocks": r.relocated_blocks,
        "compressed_bytes": r.relocated_bytes,
        "journal_records": r.journal_records,
        "journal_tail": r.journal_tail,
        "unnamed_tail_bytes": r.unnamed_tail_bytes,
        "remote_blocks": r.remote_blocks,
        "leftovers": r.leftovers,
        "unreferenced_bytes": r.unreferenced_bytes,
        "problems": r.problems,
    })
}

/// RFC 3339 UTC, as `--json` prints times.
pub fn rfc3339(sec: i64) -> String {
    utc_with(sec, |y, mo, d, h, mi, s| {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    })
}

/// `900` as `15m`, `86400` as `1d`: the largest unit that divides it.
pub fn duration(secs: u64) -> String {
    for (unit, n) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if secs % n == 0 {
            return format!("{}{unit}", secs / n);
        }
    }
    format!("{secs}s")
}

/// `scion list --json`: JSON Lines, one object per clone or snapshot.
pub fn render_listing_json(rows: &[scion_fs::Listing]) -> String {
    let mut out = String::new();
    for l in rows {
        let v = serde_json::json!({
            "kind": kind_name(l),
            "id": l.ns,
            "path": l.path.as_ref().map(|p| show(p)),
            "origin": String::from_utf8_lossy(&l.origin),
            "created": rfc3339(l.created.sec),
            "scheduled": l.scheduled,
            "orphaned": l.orphaned,
            "refer": l.referenced,
            "used": l.exclusive,
            "stored": l.stored,
            "clones": clones_of(rows, l).iter().map(|c| c.ns).collect::<Vec<_>>(),
        });
        out += &format!("{v}\n");
    }
    out
}

/// `scion snapshot schedule --list`: a table, or JSON Lines with `--json`
/// (`{"dir", "every_s", "keep", "keep_while_free", "min_free", "last_run", "next_run", "kept"}`).
pub fn render_schedules(rows: &[scion_fs::schedule::ScheduleRow], json: bool, scripted: bool, exact: bool) -> String {
    let mut out = String::new();
    if json {
        for r in rows {
            let v = serde_json::json!({
                "dir": show(&r.schedule.dir),
                "every_s": r.schedule.every,
                "keep": r.schedule.keep.to_string(),
                "keep_while_free": r.schedule.limits.keep_while_free,
                "min_free": r.schedule.limits.min_free,
                "last_run": r.last_run.map(rfc3339),
                "next_run": r.next_run.map(rfc3339),
                "kept": r.kept,
            });
            out += &format!("{v}\n");
        }
        return out;
    }
    if !scripted {
        out += &format!(
            "{:<32} {:>6} {:<44} {:>20} {:>20} {:>5}\n",
            "DIRECTORY", "EVERY", "KEEP", "LAST RUN (UTC)", "NEXT RUN (UTC)", "KEPT"
        );
    }
    let when = |t: Option<i64>, none: &str| match (t, exact) {
        (Some(t), true) => t.to_string(),
        (None, true) => "0".into(),
        (Some(t), false) => utc(t),
        (None, false) => none.into(),
    };
    for r in rows {
        let mut keep = r.schedule.keep.to_string();
        if let Some(p) = r.schedule.limits.keep_while_free {
            keep += &format!(" while>{p}%");
        }
        if let Some(p) = r.schedule.limits.min_free {
            keep += &format!(" min-free {p}%");
        }
        let every = if exact { r.schedule.every.to_string() } else { duration(r.schedule.every) };
        let (last, next) = (when(r.last_run, "-"), when(r.next_run, "(directory gone)"));
        if scripted {
            out += &[show(&r.schedule.dir), every, keep, last, next, r.kept.to_string()].join("\t");
            out.push('\n');
        } else {
            out += &format!("{:<32} {:>6} {:<44} {:>20} {:>20} {:>5}\n", show(&r.schedule.dir), every, keep, last, next, r.kept);
        }
    }
    out
}

pub fn kind_word(k: scion_fs::Kind) -> &'static str {
    match k {
        scion_fs::Kind::File => "file",
        scion_fs::Kind::Dir => "dir",
        scion_fs::Kind::Symlink => "symlink",
        _ => "other",
    }
}

/// `scion versions`: a table, or JSON Lines, oldest first (`{"snapshots", "live", "size",
/// "mtime", "kind"}`).
pub fn render_versions(vs: &[scion_fs::versions::Version], json: bool) -> String {
    let mut out = String::new();
    if json {
        for v in vs {
            let snaps: Vec<String> = v.snapshots.iter().map(|s| show(s)).collect();
            let j = serde_json::json!({
                "snapshots": snaps,
                "live": v.live,
                "size": v.size,
                "mtime": format!("{}.{:09}Z", rfc3339(v.mtime.sec).trim_end_matches('Z'), v.mtime.nsec),
                "kind": kind_word(v.kind),
            });
            out += &format!("{j}\n");
        }
        return out;
    }
    out += &format!(
        "{:<4} {:<7} {:>12} {:<20} {:<5} {}\n",
        "#", "KIND", "SIZE", "MTIME (UTC)", "LIVE", "SNAPSHOTS"
    );
    for (i, v) in vs.iter().enumerate() {
        let snaps: Vec<String> = v.snapshots.iter().map(|s| show(s)).collect();
        out += &format!(
            "{:<4} {:<7} {:>12} {:<20} {:<5} {}\n",
            i + 1,
            kind_word(v.kind),
            v.size,
            utc(v.mtime.sec),
            if v.live { "yes" } else { "" },
            if snaps.is_empty() { "-".into() } else { snaps.join(" ") }
        );
    }
    out
}

/// `scion versions --deleted`: a table, or JSON Lines (`{"path", "snapshot", "kind"}`).
pub fn render_deleted(ds: &[scion_fs::versions::Deleted], json: bool) -> String {
    let mut out = String::new();
    for d in ds {
        if json {
            let j = serde_json::json!({
                "path": String::from_utf8_lossy(&d.path),
                "snapshot": show(&d.snapshot),
                "kind": kind_word(d.kind),
            });
            out += &format!("{j}\n");
        } else {
            out += &format!(
                "{:<7} {}  (newest in {})\n",
                kind_word(d.kind),
                String::from_utf8_lossy(&d.path),
                show(&d.snapshot)
            );
        }
    }
    out
}

use scion::client::utc_with;

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
