//! `scion remote add|list|remove`, `scion push` and `scion pull` (issue 41): the object
//! stores (S3 API) a store reaches by name, kept in the store (`STORE/remotes`) and used by
//! its daemon; trees published there and attached from there. Only where
//! a remote is: credentials come the standard AWS ways to the daemon that uses it
//! (`AWS_ACCESS_KEY_ID`... in its environment, `~/.aws` profiles, instance metadata) and
//! are never written into the store.

use crate::receive_cmd::hex;
use crate::tree_cmds::{call, optional_path};
use scion_daemon::control::{Op, Reply};
use scion_fs::records::remotes::Remote;
use std::path::PathBuf;

/// `scion remote add NAME s3://BUCKET/PREFIX [--endpoint URL] [--region R]`.
pub fn add(name: String, url: String, endpoint: Option<String>, region: Option<String>, mount: Option<PathBuf>, store: Option<PathBuf>) -> Result<(), String> {
    let r = Remote::parse(&name, &url, endpoint.as_deref().unwrap_or(""), region.as_deref().unwrap_or(""))?;
    let at = optional_path(mount, &store)?;
    let Reply::RemoteAdded = call(&at, &Op::RemoteAdd(r.clone()))? else {
        return Err("the daemon answered something else".into());
    };
    println!("remote {} is {}{}", r.name, r.url(), where_(&r));
    Ok(())
}

/// `scion remote remove NAME`: Ok(false) if there is none of that name.
pub fn remove(name: String, mount: Option<PathBuf>, store: Option<PathBuf>) -> Result<bool, String> {
    let at = optional_path(mount, &store)?;
    match call(&at, &Op::RemoteRemove { name: name.clone() }) {
        Ok(Reply::RemoteRemoved) => {
            println!("remote {name} removed (what was pushed to it stays there)");
            Ok(true)
        }
        Ok(_) => Err("the daemon answered something else".into()),
        Err(e) if e.contains("no remote named") => Ok(false),
        Err(e) => Err(e),
    }
}

/// `scion remote list [--json]`: a table, or JSON Lines (`{"name", "url", "bucket",
/// "prefix", "endpoint", "region"}`, empty strings for what is not set).
pub fn list(json: bool, mount: Option<PathBuf>, store: Option<PathBuf>) -> Result<(), String> {
    let at = optional_path(mount, &store)?;
    let Reply::Remotes(list) = call(&at, &Op::RemoteList)? else {
        return Err("the daemon answered something else".into());
    };
    print!("{}", render(&list, json));
    Ok(())
}

fn where_(r: &Remote) -> String {
    let mut s = String::new();
    if !r.endpoint.is_empty() {
        s += &format!(" at {}", r.endpoint);
    }
    if !r.region.is_empty() {
        s += &format!(" in {}", r.region);
    }
    s
}

fn render(list: &[Remote], json: bool) -> String {
    let mut out = String::new();
    if json {
        for r in list {
            let j = serde_json::json!({
                "name": r.name, "url": r.url(), "bucket": r.bucket, "prefix": r.prefix,
                "endpoint": r.endpoint, "region": r.region,
            });
            out += &format!("{j}\n");
        }
        return out;
    }
    if list.is_empty() {
        return out;
    }
    let w = list.iter().map(|r| r.name.len()).max().unwrap_or(0).max(4);
    let u = list.iter().map(|r| r.url().len()).max().unwrap_or(0).max(3);
    out += &format!("{:<w$}  {:<u$}  {:<10}  ENDPOINT\n", "NAME", "URL", "REGION");
    for r in list {
        let dash = |s: &str| if s.is_empty() { "-".to_string() } else { s.to_string() };
        out += &format!("{:<w$}  {:<u$}  {:<10}  {}\n", r.name, r.url(), dash(&r.region), dash(&r.endpoint));
    }
    out
}

/// `scion push SNAPSHOT REMOTE --name NAME [--json]`: the snapshot published on the remote as
/// the next version of NAME; only blocks the remote lacks travel.
pub fn push(snapshot: PathBuf, remote: String, name: String, json: bool) -> Result<(), String> {
    let at = crate::tree_cmds::locate(&snapshot, true, &None)?;
    if at.mnt.is_none() {
        return Err(format!("{} is not in a mounted scion store", snapshot.display()));
    }
    let snap = crate::tree_cmds::store_path(&at);
    let started = std::time::Instant::now();
    let Reply::Pushed(p) = call(&at, &Op::Push { snap, remote: remote.clone(), name: name.clone() })? else {
        return Err("the daemon answered something else".into());
    };
    let s = &p.stats;
    let secs = started.elapsed().as_secs_f64();
    if json {
        let j = serde_json::json!({
            "remote": remote, "name": name, "version": p.version, "root": hex(&p.root), "tree": hex(&p.tree),
            "blocks": s.blocks, "new_blocks": s.new_blocks, "new_bytes": s.new_bytes, "sent_bytes": s.sent_bytes,
            "objects": s.objects, "known_packs": s.known_packs, "seconds": secs,
        });
        println!("{j}");
    } else {
        println!(
            "pushed {name} version {} to {remote}: {} blocks, {} new ({:.1} MiB); {:.1} MiB sent in {} objects, {secs:.1} s",
            p.version,
            s.blocks,
            s.new_blocks,
            s.new_bytes as f64 / (1 << 20) as f64,
            s.sent_bytes as f64 / (1 << 20) as f64,
            s.objects
        );
    }
    Ok(())
}

/// `scion pull REMOTE NAME DIR [--version N] [--prefetch] [--json]`: the tree published as
/// NAME appears at DIR (a new path in a mount whose store has REMOTE), its blocks fetched when
/// first read, and is snapshotted under the name it was pushed from.
pub fn pull(remote: String, name: String, dir: PathBuf, version: Option<u64>, prefetch: bool, json: bool) -> Result<(), String> {
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let at = crate::tree_cmds::locate(parent, true, &None)?;
    if at.mnt.is_none() {
        return Err(format!("{} is not in a mounted scion store", parent.display()));
    }
    if dir.symlink_metadata().is_ok() {
        return Err(format!("{} exists: pull makes a new directory", dir.display()));
    }
    let started = std::time::Instant::now();
    let mut stream = Vec::new();
    let mut sink = |b: &[u8]| -> Result<(), String> {
        stream.extend_from_slice(b);
        Ok(())
    };
    let staging = crate::receive_cmd::PullStaging::new(&dir)?;
    let op = Op::PullOpen { remote: remote.clone(), name: name.clone(), version, tmp: staging.rel.clone(), pid: std::process::id() };
    let opened = crate::tree_cmds::call_streaming(&at, &op, &mut sink);
    let built = match opened {
        Ok(Reply::PullOpened { attach, version, root, blocks }) => {
            let tty = unsafe { libc::isatty(2) } == 1;
            crate::receive_cmd::build_pulled(&staging, stream, attach, tty && !json).map(|s| (s, attach, version, root, blocks))
        }
        Ok(_) => Err("the daemon answered something else".into()),
        Err(e) => Err(e),
    };
    // Built and renamed, or removed: either way the intent goes (a crash left it for the
    // next mount to settle).
    let done = call(&staging.at, &Op::PullDone { tmp: staging.rel.clone() });
    let (snapshot, attach, version, root, blocks) = built?;
    done?;
    let attached = started.elapsed().as_secs_f64();
    let fetched = if prefetch {
        match call(&at, &Op::Prefetch { attach })? {
            Reply::Prefetched(n) => Some(n),
            _ => return Err("the daemon answered something else".into()),
        }
    } else {
        None
    };
    let snapshot = String::from_utf8_lossy(&snapshot).into_owned();
    if json {
        let j = serde_json::json!({
            "dir": dir.display().to_string(), "remote": remote, "name": name, "version": version, "root": hex(&root),
            "blocks": blocks, "snapshot": snapshot, "seconds": attached, "prefetched_bytes": fetched,
        });
        println!("{j}");
    } else {
        println!("{} is {name} version {version} from {remote} ({blocks} blocks, fetched when read; snapshot {snapshot}), attached in {attached:.2} s", dir.display());
        if let Some(n) = fetched {
            println!("prefetched {:.1} MiB", n as f64 / (1 << 20) as f64);
        }
    }
    Ok(())
}

/// `scion remote gc NAME [--grace D] [--dry-run] [--json]`.
pub fn gc(name: String, grace: String, dry: bool, json: bool, mount: Option<PathBuf>) -> Result<(), String> {
    let grace_s = if grace == "0" { 0 } else { scion_fs::schedule::parse_every(&grace).map_err(|e| format!("--grace: {e}"))? };
    let at = optional_path(mount, &None)?;
    let Reply::RemoteGc(g) = call(&at, &Op::RemoteGc { remote: name.clone(), grace_s, dry })? else {
        return Err("the daemon answered something else".into());
    };
    if json {
        let j = serde_json::json!({
            "manifests": g.manifests, "trees": g.trees, "packs": g.packs, "removed": g.removed,
            "removed_bytes": g.removed_bytes, "young": g.young, "pushes": g.pushes, "dry_run": dry,
        });
        println!("{j}");
    } else if g.pushes > 0 {
        println!("remote {name}: {} pushes under way: nothing removed (gc again once they are done)", g.pushes);
    } else {
        println!(
            "remote {name}: {} versions; {} trees and {} packs found; {} objects ({:.1} MiB) {}; {} unneeded kept (younger than {grace})",
            g.manifests,
            g.trees,
            g.packs,
            g.removed,
            g.removed_bytes as f64 / (1 << 20) as f64,
            if dry { "would be removed" } else { "removed" },
            g.young
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_are_shown_as_a_table_and_as_json_lines() {
        let list = vec![
            Remote::parse("minio", "s3://bases/scion", "http://127.0.0.1:9000", "us-east-1").unwrap(),
            Remote::parse("aws", "s3://my-bucket", "", "").unwrap(),
        ];
        assert_eq!(
            render(&list, false),
            "NAME   URL               REGION      ENDPOINT\n\
             minio  s3://bases/scion  us-east-1   http://127.0.0.1:9000\n\
             aws    s3://my-bucket    -           -\n"
        );
        let j: Vec<serde_json::Value> = render(&list, true).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(j[0]["prefix"], "scion");
        assert_eq!(j[1]["endpoint"], "");
        assert_eq!(render(&[], false), "");
    }
}
