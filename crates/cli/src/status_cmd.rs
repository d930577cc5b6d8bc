//! `scion status [MOUNTPOINT] [--json]` (issue 22 item 5): for each scion mount (or the one
//! given, or an unmounted store with --store), its store, daemon, space, commit state,
//! background work and failures, asked of the daemon (`Op::Status`).

use crate::control::human;
use crate::tree_cmds::{call, locate, scion_mounts, Located};
use scion_daemon::control::{Op, Reply, Status};
use std::path::PathBuf;

pub fn status(path: Option<PathBuf>, store: Option<PathBuf>, json: bool) -> Result<(), String> {
    let places: Vec<Located> = match (&store, path) {
        (Some(s), _) => vec![Located::unmounted(s.clone())],
        (None, Some(p)) => vec![locate(&p, true, &None)?],
        (None, None) => {
            let mounts = scion_mounts();
            if mounts.is_empty() {
                return Err("no scion mount here (for an unmounted store: --store STORE)".into());
            }
            mounts.into_iter().map(|(mnt, store, device)| Located::mount_root(mnt, store, device)).collect()
        }
    };
    let mut failed = 0;
    for at in &places {
        match call(at, &Op::Status) {
            Ok(Reply::Status(st)) => {
                // A mounted store's cubes (their states), from the daemon that serves them.
                let cubes = match (&at.mnt, call(at, &Op::CubeList)) {
                    (Some(_), Ok(Reply::Cubes(rows))) => rows,
                    _ => Vec::new(),
                };
                print!("{}", render(at, &st, &cubes, json))
            }
            Ok(_) => return Err("the daemon answered something else".into()),
            // One place: its failure is the command's, said once. Several: each is said,
            // and the command fails after the others were shown.
            Err(e) if places.len() == 1 => return Err(e),
            Err(e) => {
                let where_ = at.mnt.as_ref().unwrap_or(&at.store).display().to_string();
                eprintln!("scion status: {where_}: {}", crate::humane(&e));
                failed += 1;
            }
        }
    }
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} of {} mounts did not answer", places.len())),
    }
}

fn ago(s: Option<u64>) -> String {
    match s {
        None => "not yet".into(),
        Some(s) if s < 120 => format!("{s} s ago"),
        Some(s) if s < 7200 => format!("{} min ago", s / 60),
        Some(s) => format!("{} h ago", s / 3600),
    }
}

fn render(at: &Located, st: &Status, cubes: &[scion_daemon::cubes::CubeRow], json: bool) -> String {
    let failing = cubes.iter().filter(|c| c.state != "ok").count();
    let f = &st.facts;
    let mnt = at.mnt.as_ref().map(|m| m.display().to_string());
    let store = String::from_utf8_lossy(&st.store).into_owned();
    if json {
        let v = serde_json::json!({
            "mountpoint": mnt,
            "store": store,
            "pid": (st.pid != 0).then_some(st.pid),
            "uptime_s": (st.pid != 0).then_some(st.uptime_s),
            "host_total": st.host_total,
            "host_free": st.host_free,
            "pack_bytes": f.pack_bytes,
            "snapshots_only_bytes": st.snapshots_only,
            "compressed_blocks": f.compressed_blocks,
            "compressed_bytes": f.compressed_bytes,
            "clones": st.clones,
            "snapshots": st.snapshots,
            "schedules": f.schedules,
            "mirrors": f.mirrors,
            "mirrors_failing": st.mirrors_failing,
            "cubes": cubes.len(),
            "cubes_failing": failing,
            "orphaned": st.orphaned,
            "orphaned_bytes": st.orphaned_bytes,
            "generation": f.generation,
            "checkpoint_age_s": f.checkpoint_age_s,
            "journal_bytes": f.journal_bytes,
            "dirty_bytes": f.dirty_bytes,
            "unpunched_blocks": f.unpunched_blocks,
            "repack_age_s": f.repack_age_s,
            "compress_age_s": f.compress_age_s,
            "failed": f.failed,
            "host_full": f.host_full,
            "written": {
                "user_bytes": f.written.user,
                "host_bytes": f.written.host(),
                "data_bytes": f.written.data,
                "journal_bytes": f.written.journal,
                "meta_bytes": f.written.meta,
                "repack_bytes": f.written.repack,
                "compress_bytes": f.written.compress,
                "amplification": amplification(&f.written),
            },
            "memory": {
                "rss_bytes": (st.pid != 0).then_some(st.rss_bytes),
                "inodes": f.memory.inodes,
                "kernel_inodes": f.memory.kernel_inodes,
                "inode_bytes": f.memory.inode_bytes,
                "node_cache_bytes": f.memory.node_cache_bytes,
                "node_cache_limit": f.memory.node_cache_limit,
                "hash_memo_entries": f.memory.hash_memo_entries,
                "hash_memo_limit": f.memory.hash_memo_limit,
                "whereabouts_entries": f.memory.whereabouts_entries,
                "whereabouts_limit": f.memory.whereabouts_limit,
                "listings": st.listings,
                "listing_bytes": st.listing_bytes,
                "buffered_bytes": f.dirty_bytes,
            },
            "lock": lock_json(&f.lock),
            "nfs": (!st.nfs.is_empty()).then_some(&st.nfs),
            "remote": st.remote.as_ref().map(|r| serde_json::json!({
                "fetches": r.fetches, "fetched_bytes": r.fetched_bytes, "failures": r.failures,
                "failing": (!r.failing.is_empty()).then_some(&r.failing),
                "failing_since": (!r.failing.is_empty()).then_some(r.failing_since),
                "cache_bytes": r.cache_bytes, "cache_limit": r.cache_limit,
            })),
        });
        return format!("{v}\n");
    }
    let mut out = match &mnt {
        Some(m) => format!("{m}: store {store}, daemon pid {}, up {}\n", st.pid, ago(Some(st.uptime_s)).trim_end_matches(" ago")),
        None => format!("{store}: not mounted\n"),
    };
    out += &format!(
        "  space: host {} free of {}; packs {} ({} held only by snapshots; {} blocks of old versions compressed into {})\n",
        human(st.host_free),
        human(st.host_total),
        human(f.pack_bytes),
        human(st.snapshots_only),
        f.compressed_blocks,
        human(f.compressed_bytes)
    );
    out += &format!(
        "  {} clones, {} snapshots, {} schedules, {} mirrors ({} failing: see scion mirror status)\n",
        st.clones, st.snapshots, f.schedules, f.mirrors, st.mirrors_failing
    );
    out += &format!(
        "  checkpoint {} taken {}; journal {}; {} buffered; {} freed blocks waiting to be given back\n",
        f.generation,
        ago(Some(f.checkpoint_age_s)),
        human(f.journal_bytes),
        human(f.dirty_bytes),
        f.unpunched_blocks
    );
    if !cubes.is_empty() {
        out += &format!(
            "  {} cubes, {} of them not ok{}\n",
            cubes.len(),
            failing,
            if failing > 0 { ": see scion cube list" } else { "" }
        );
    }
    if st.orphaned > 0 {
        out += &format!(
            "  {} snapshots of directories that are gone hold {}: scion list --orphaned names them, scion destroy @ID frees them\n",
            st.orphaned,
            human(st.orphaned_bytes)
        );
    }
    out += &format!("  background: repack {}, compression of old versions {}\n", ago(f.repack_age_s), ago(f.compress_age_s));
    let w = &f.written;
    out += &format!(
        "  written since mount: {} by users, {} to the host ({} data, {} journal, {} metadata, {} repack, {} compression){}\n",
        human(w.user),
        human(w.host()),
        human(w.data),
        human(w.journal),
        human(w.meta),
        human(w.repack),
        human(w.compress),
        amplification(w).map_or(String::new(), |a| format!("; write amplification {a:.2}"))
    );
    let m = &f.memory;
    out += &format!(
        "  memory: {}{} inodes loaded ({} held by the kernel) in {}; node cache {} of {}; {} of {} tree hashes kept; {} of {} evicted inodes' places kept; {} open directory listings in {}; {} buffered\n",
        if st.pid != 0 { format!("daemon {} resident; ", human(st.rss_bytes)) } else { String::new() },
        m.inodes,
        m.kernel_inodes,
        human(m.inode_bytes),
        human(m.node_cache_bytes),
        human(m.node_cache_limit),
        m.hash_memo_entries,
        m.hash_memo_limit,
        m.whereabouts_entries,
        m.whereabouts_limit,
        st.listings,
        human(st.listing_bytes),
        human(f.dirty_bytes),
    );
    if !st.nfs.is_empty() {
        out += &format!("  serving {}\n", st.nfs);
    }
    if let Some(r) = &st.remote {
        out += &format!(
            "  remotes: {} fetches ({}), {} failed; cache {} of {}\n",
            r.fetches,
            human(r.fetched_bytes),
            r.failures,
            human(r.cache_bytes),
            human(r.cache_limit)
        );
        if !r.failing.is_empty() {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let since = ago(Some(now.saturating_sub(r.failing_since)));
            out += &format!("  remote FAILING (last failure {since}): {} (reads of blocks not cached get EIO; tried again at each read)\n", r.failing);
        }
    }
    if f.lock.holds > 0 {
        out += &lock_line(&f.lock);
    }
    out += &match &f.failed {
        None if f.host_full => "  state: host filesystem full: changes get ENOSPC until there is room (no remount needed)\n".to_string(),
        None => "  state: ok\n".to_string(),
        Some(why) => format!("  state: FAILED, changes refused until it is mounted again: {why}\n"),
    };
    out
}

/// Holds (or waits) of the engine lock by length, named by their bounds.
fn by_length(counts: &[u64; 5]) -> serde_json::Value {
    serde_json::json!({
        "le_1ms": counts[0], "le_10ms": counts[1], "le_50ms": counts[2], "le_250ms": counts[3], "over_250ms": counts[4],
    })
}

fn lock_json(l: &scion_fs::LockReport) -> serde_json::Value {
    serde_json::json!({
        "holds": l.holds,
        "held": by_length(&l.held),
        "waited": by_length(&l.waited),
        "longest_wait_us": l.longest_wait_us,
        "longest": l.longest.iter().map(|h| serde_json::json!({"us": h.us, "at": h.at, "ended_s": h.ended_s})).collect::<Vec<_>>(),
    })
}

/// The engine lock in one line: what every request waits for while something holds it.
fn lock_line(l: &scion_fs::LockReport) -> String {
    let ms = |us: u64| format!("{:.1} ms", us as f64 / 1000.0);
    let longest = match l.longest.first() {
        Some(h) => format!("; longest {} (taken at {}, {} s after mount)", ms(h.us), h.at, h.ended_s),
        None => String::new(),
    };
    format!(
        "  engine lock: {} holds, {} over 10 ms, {} over 50 ms{longest}; longest wait {}\n",
        l.holds,
        l.held[2..].iter().sum::<u64>(),
        l.held[3..].iter().sum::<u64>(),
        ms(l.longest_wait_us)
    )
}

/// Bytes written to the host per byte users wrote, once users have written something.
fn amplification(w: &scion_fs::status::Written) -> Option<f64> {
    (w.user > 0).then(|| w.host() as f64 / w.user as f64)
}
