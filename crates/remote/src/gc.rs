//! `scion remote gc REMOTE`: removes what no manifest needs, safely beside other hosts.
//!
//! Mark: every manifest (of every name and version: gc never removes one) names a tree
//! object, and every tree object names its packs. Sweep: an unmarked tree object, pack or
//! pack index goes only if it is older than the grace period (a push under way uploads packs
//! and its tree before its manifest, and those are young); a pack's index goes before the
//! pack, so no push learns of a pack that is going. The manifests are listed again before the
//! sweep, so a push that finished during the mark keeps what it named.
//!
//! A gc and a push never overlap (`lock.rs`): a gc that finds a push under way removes
//! nothing, and a push waits for a gc to end before it learns what the remote holds. The
//! grace period is for what the locks cannot see: a push on a host whose clock is far off,
//! or one whose lock went stale (an hour) while it still ran. A push still checks that the
//! packs it reuses are there before it writes its manifest.

use crate::client::Client;
use crate::layout::{self, hex, Hash, Manifest, TreeObject};
use std::collections::HashSet;

/// What a gc found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    pub manifests: u64,
    pub trees: u64,
    pub packs: u64,
    /// Objects removed (or that would be, dry), and their bytes.
    pub removed: u64,
    pub removed_bytes: u64,
    /// Unneeded objects kept because they are younger than the grace period.
    pub young: u64,
    /// Pushes under way when the gc began: then it removes nothing.
    pub pushes: u64,
}

fn failed(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Every tree object the manifests name (`seen`: manifests read already, not read again).
fn mark_trees(client: &Client, seen: &mut HashSet<String>, trees: &mut HashSet<Hash>) -> Result<u64, String> {
    let mut n = 0;
    for o in client.list("manifests/").map_err(failed)? {
        if !seen.insert(o.key.clone()) {
            continue;
        }
        let b = client.get(&o.key).map_err(failed)?;
        let m = Manifest::decode(&b).map_err(|e| format!("{}: {e} (gc stops: it cannot tell what that version needs)", o.key))?;
        trees.insert(m.tree);
        n += 1;
    }
    Ok(n)
}

/// The packs the tree objects `trees` name (`done`: trees read already).
fn mark_packs(client: &Client, trees: &HashSet<Hash>, done: &mut HashSet<Hash>, packs: &mut HashSet<Hash>) -> Result<(), String> {
    for t in trees {
        if !done.insert(*t) {
            continue;
        }
        let b = client.get(&layout::tree_key(t)).map_err(|e| format!("tree object {}: {e} (gc stops)", hex(t)))?;
        if blake3::hash(&b).as_bytes() != t {
            return Err(format!("tree object {} has other bytes than its name says (gc stops)", hex(t)));
        }
        let tree = TreeObject::decode(&b).map_err(failed)?;
        packs.extend(tree.packs.iter().map(|p| p.0));
    }
    Ok(())
}

/// Collects `client`'s remote: objects unneeded and at least `grace_s` seconds old are removed
/// (listed only, `dry`). `now` is the time in seconds since the epoch.
pub fn gc(client: &Client, grace_s: u64, now: i64, dry: bool, progress: &mut dyn FnMut(&GcReport)) -> Result<GcReport, String> {
    let mut rep = GcReport::default();
    let lock = crate::lock::Lock::take(client, "gc")?;
    let (pushes, stale) = crate::lock::held(client, "push", now, Some(&lock))?;
    if !pushes.is_empty() {
        rep.pushes = pushes.len() as u64;
        return Ok(rep);
    }
    let (_, stale_gc) = crate::lock::held(client, "gc", now, Some(&lock))?;
    for key in stale.iter().chain(&stale_gc) {
        if !dry {
            client.delete(key).map_err(failed)?;
        }
    }
    let (mut seen, mut trees, mut done, mut packs) = (HashSet::new(), HashSet::new(), HashSet::new(), HashSet::new());
    rep.manifests = mark_trees(client, &mut seen, &mut trees)?;
    mark_packs(client, &trees, &mut done, &mut packs)?;
    let objects = client.list("trees/").map_err(failed)?.into_iter().chain(client.list("packs/").map_err(failed)?);
    let old = |modified: i64| past_grace(now, modified, grace_s);
    let mut doomed = Vec::new();
    for o in objects {
        let (name, kind) = match (o.key.strip_prefix("trees/"), o.key.strip_prefix("packs/")) {
            (Some(t), _) => (t, 't'),
            (_, Some(p)) => match p.strip_suffix(".idx") {
                Some(p) => (p, 'i'),
                None => (p, 'p'),
            },
            _ => continue,
        };
        let Some(h) = layout::unhex(name) else { continue };
        let needed = if kind == 't' { trees.contains(&h) } else { packs.contains(&h) };
        match kind {
            't' => rep.trees += 1,
            'p' => rep.packs += 1,
            _ => {}
        }
        if needed {
            continue;
        }
        if !old(o.modified) {
            rep.young += 1;
            continue;
        }
        doomed.push((kind, h, o.key, o.size));
    }
    // What a push finished meanwhile names stays.
    rep.manifests += mark_trees(client, &mut seen, &mut trees)?;
    mark_packs(client, &trees, &mut done, &mut packs)?;
    // Indexes first, then packs, then trees.
    doomed.sort_by_key(|(kind, ..)| match kind {
        'i' => 0,
        'p' => 1,
        _ => 2,
    });
    for (kind, h, key, size) in doomed {
        if (kind == 't' && trees.contains(&h)) || (kind != 't' && packs.contains(&h)) {
            continue;
        }
        if !dry {
            client.delete(&key).map_err(failed)?;
        }
        rep.removed += 1;
        rep.removed_bytes += size;
        if rep.removed % 64 == 0 {
            progress(&rep);
        }
    }
    progress(&rep);
    drop(lock);
    Ok(rep)
}

/// Whether an object modified at `modified` is past a grace period of `grace_s` seconds at
/// `now` (both whole seconds, as S3 lists them): as old as the period or older. With
/// `--grace 0` that is whatever no version names, also an object written this very second
/// (an age of 0: a strict "older than" kept it, and a gc right after a cut push removed
/// nothing, as CI once found).
fn past_grace(now: i64, modified: i64, grace_s: u64) -> bool {
    now.saturating_sub(modified) >= grace_s.min(i64::MAX as u64) as i64
}

#[cfg(test)]
mod grace_tests {
    use super::past_grace;

    #[test]
    fn an_object_is_past_the_grace_once_as_old_as_it() {
        assert!(past_grace(100, 100, 0), "--grace 0 takes what was written this second");
        assert!(!past_grace(100, 101, 0), "a clock ahead of ours: not old yet");
        assert!(!past_grace(100, 50, 86_400));
        assert!(past_grace(86_500, 100, 86_400));
        assert!(!past_grace(86_499, 100, 86_400));
        assert!(!past_grace(0, 0, u64::MAX));
    }
}
