//! `scion remote add|list|remove` (issue 41 item 1): the object stores (S3 API) a store
//! reaches by name, kept in the store (`STORE/remotes`) and used by its daemon. Only where
//! a remote is: credentials come the standard AWS ways to the daemon that uses it
//! (`AWS_ACCESS_KEY_ID`... in its environment, `~/.aws` profiles, instance metadata) and
//! are never written into the store.

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
