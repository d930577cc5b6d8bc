//! The remotes file (`STORE/remotes`, `docs/format.md` "Remotes"): the object stores (S3 API)
//! a store publishes trees to and attaches them from (issue 41), by name. Where a remote
//! is and how to reach it, never credentials: those come the standard AWS ways to the daemon
//! that uses the remote. A two-slot file (`slots.rs`; magic "SCRT", version 1); the payload
//! is text, one remote per line: `NAME BUCKET PREFIX ENDPOINT REGION`, each escaped as in
//! the schedules file; an empty prefix, endpoint or region is `/` there (the escaping of the
//! empty string).

use super::slots::{escape, unescape, SlotFile};
use scion_store::{Error, Host, Result};
use std::path::Path;

pub const FILE: &str = "remotes";
/// Remotes a store keeps at most.
pub const MAX_REMOTES: usize = 64;
/// The longest name, endpoint and prefix.
const MAX_NAME: usize = 64;
const MAX_FIELD: usize = 1024;
const SLOTS: SlotFile = SlotFile {
    name: FILE,
    magic: b"SCRT",
    version: 1,
};

/// An object store a store reaches by name: `s3://BUCKET/PREFIX`, at `endpoint` (an
/// `http://` or `https://` URL; empty: AWS's for the region) in `region` (empty: the
/// client's default, `AWS_REGION` and the profile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    pub name: String,
    pub bucket: String,
    /// Where below the bucket the store's objects go: no leading or trailing `/`.
    pub prefix: String,
    pub endpoint: String,
    pub region: String,
}

impl Remote {
    /// A remote from what `scion remote add` takes (`url` as `s3://BUCKET[/PREFIX]`), or why
    /// not, in words for the user.
    pub fn parse(name: &str, url: &str, endpoint: &str, region: &str) -> std::result::Result<Remote, String> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| format!("{url:?}: a remote is s3://BUCKET or s3://BUCKET/PREFIX"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let r = Remote {
            name: name.to_string(),
            bucket: bucket.to_string(),
            prefix: prefix.trim_end_matches('/').to_string(),
            endpoint: endpoint.trim_end_matches('/').to_string(),
            region: region.to_string(),
        };
        r.check()?;
        Ok(r)
    }

    /// The remote as a URL: `s3://BUCKET/PREFIX`.
    pub fn url(&self) -> String {
        match self.prefix.is_empty() {
            true => format!("s3://{}", self.bucket),
            false => format!("s3://{}/{}", self.bucket, self.prefix),
        }
    }

    /// Every field as the rules of S3 and of this file want it.
    pub fn check(&self) -> std::result::Result<(), String> {
        let n = &self.name;
        if n.is_empty() || n.len() > MAX_NAME || n.starts_with(['.', '-']) || !n.bytes().all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c)) {
            return Err(format!("remote name {n:?}: 1 to {MAX_NAME} letters, digits, '.', '_' or '-', not first '.' or '-'"));
        }
        // S3's bucket naming rules (general purpose buckets).
        let b = &self.bucket;
        let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !(3..=63).contains(&b.len())
            || !b.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
            || !edge_ok(b.chars().next())
            || !edge_ok(b.chars().last())
            || b.contains("..")
        {
            return Err(format!("bucket {b:?}: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"));
        }
        let p = &self.prefix;
        if p.len() > MAX_FIELD || p.starts_with('/') || p.ends_with('/') || p.split('/').any(|s| s.is_empty() && !p.is_empty()) || p.chars().any(|c| c.is_control()) {
            return Err(format!("prefix {p:?}: names separated by single '/', no control characters"));
        }
        let e = &self.endpoint;
        if !e.is_empty() && (e.len() > MAX_FIELD || !(e.starts_with("http://") || e.starts_with("https://")) || e.contains(char::is_whitespace)) {
            return Err(format!("endpoint {e:?}: an http:// or https:// URL"));
        }
        let r = &self.region;
        if r.len() > MAX_NAME || !r.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
            return Err(format!("region {r:?}: letters, digits and '-'"));
        }
        Ok(())
    }
}

/// The remotes, and the sequence number of the slot they were read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub remotes: Vec<Remote>,
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::corrupt("remotes file", FILE, why.to_string())
}

pub fn encode_payload(list: &[Remote]) -> Vec<u8> {
    let mut out = String::new();
    for r in list {
        let f = [&r.name, &r.bucket, &r.prefix, &r.endpoint, &r.region].map(|s| escape(s.as_bytes()));
        out.push_str(&f.join(" "));
        out.push('\n');
    }
    out.into_bytes()
}

pub fn decode_payload(b: &[u8]) -> Result<Vec<Remote>> {
    let text = std::str::from_utf8(b).map_err(|_| bad("not text"))?;
    let mut list: Vec<Remote> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [name, bucket, prefix, endpoint, region] = f[..] else {
            return Err(bad(format!("line {line:?} does not have five fields")));
        };
        let text = |s: &str| -> Result<String> { String::from_utf8(unescape(s)?).map_err(|_| bad(format!("{s:?} is not text"))) };
        let r = Remote {
            name: text(name)?,
            bucket: text(bucket)?,
            prefix: text(prefix)?,
            endpoint: text(endpoint)?,
            region: text(region)?,
        };
        r.check().map_err(bad)?;
        if list.iter().any(|o| o.name == r.name) {
            return Err(bad(format!("two remotes named {}", r.name)));
        }
        list.push(r);
    }
    if list.len() > MAX_REMOTES {
        return Err(bad(format!("{} remotes", list.len())));
    }
    Ok(list)
}

/// The newest whole slot of a file's bytes; no file, or no whole slot: no remotes.
pub fn decode_file(b: &[u8]) -> Result<Stored> {
    Ok(match SLOTS.decode_file(b)? {
        Some((seq, p)) => Stored { seq, remotes: decode_payload(&p)? },
        None => Stored::default(),
    })
}

/// Reads the remotes of the store at `dir`.
pub fn load(host: &Host, dir: &Path) -> Result<Stored> {
    decode_file(&SLOTS.read(host, dir)?)
}

/// Writes `list` as the state after `prev` (synced). Returns the new state.
pub fn save(host: &Host, dir: &Path, prev: &Stored, list: Vec<Remote>) -> Result<Stored> {
    assert!(list.len() <= MAX_REMOTES, "{} remotes", list.len());
    let seq = prev.seq + 1;
    SLOTS.write(host, dir, seq, &encode_payload(&list))?;
    Ok(Stored { seq, remotes: list })
}

/// `scion remote add`: `r` added to the store at `dir`. A remote of that name is refused
/// (EEXIST: remove it first, so that a typo does not repoint a remote trees were pushed to).
pub fn add(host: &Host, dir: &Path, r: Remote) -> crate::FsResult<()> {
    use crate::error::errno;
    r.check().map_err(|e| errno::EINVAL.with(e))?;
    let prev = load(host, dir)?;
    if prev.remotes.iter().any(|o| o.name == r.name) {
        return Err(errno::EEXIST.with(format!("a remote named {} exists (scion remote remove {} first)", r.name, r.name)));
    }
    if prev.remotes.len() >= MAX_REMOTES {
        return Err(errno::ENOSPC.with(format!("a store keeps at most {MAX_REMOTES} remotes")));
    }
    let mut list = prev.remotes.clone();
    list.push(r);
    save(host, dir, &prev, list)?;
    Ok(())
}

/// `scion remote remove`: the remote `name` taken out of the store at `dir` (ENOENT: none).
/// What was pushed to it stays in the object store.
pub fn remove(host: &Host, dir: &Path, name: &str) -> crate::FsResult<()> {
    let prev = load(host, dir)?;
    let list: Vec<Remote> = prev.remotes.iter().filter(|r| r.name != name).cloned().collect();
    if list.len() == prev.remotes.len() {
        return Err(crate::error::errno::ENOENT.with(format!("no remote named {name}")));
    }
    save(host, dir, &prev, list)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Remote> {
        vec![
            Remote::parse("base-images", "s3://ci-cache/scion/bases/", "http://127.0.0.1:9000", "us-east-1").unwrap(),
            Remote::parse("aws", "s3://my.bucket", "", "").unwrap(),
        ]
    }

    #[test]
    fn remotes_round_trip_and_bad_ones_are_refused() {
        let s = sample();
        assert_eq!((s[0].bucket.as_str(), s[0].prefix.as_str(), s[0].url()), ("ci-cache", "scion/bases", "s3://ci-cache/scion/bases".to_string()));
        assert_eq!(s[1].url(), "s3://my.bucket");
        assert_eq!(decode_payload(&encode_payload(&s)).unwrap(), s);
        let host = scion_store::os_host();
        let tmp = tempfile::tempdir().unwrap();
        let s0 = load(&host, tmp.path()).unwrap();
        assert!(s0.remotes.is_empty());
        let s1 = save(&host, tmp.path(), &s0, s.clone()).unwrap();
        assert_eq!(load(&host, tmp.path()).unwrap(), s1);
        for (name, url, endpoint, region) in [
            ("", "s3://abc", "", ""),
            ("-x", "s3://abc", "", ""),
            ("a b", "s3://abc", "", ""),
            ("x", "https://abc", "", ""),
            ("x", "s3://ab", "", ""),
            ("x", "s3://Abc", "", ""),
            ("x", "s3://abc-", "", ""),
            ("x", "s3://a..bc", "", ""),
            ("x", "s3://abc/a//b", "", ""),
            ("x", "s3://abc", "ftp://host", ""),
            ("x", "s3://abc", "", "us east"),
        ] {
            assert!(Remote::parse(name, url, endpoint, region).is_err(), "{name} {url} {endpoint} {region} accepted");
        }
        for bad in [&b"a b / / \n"[..], b"a abc / / /\na abc / / /\n", b"a abc / /\n", b"a Abc / / /\n"] {
            assert!(decode_payload(bad).is_err(), "{:?} accepted", String::from_utf8_lossy(bad));
        }
    }
}
