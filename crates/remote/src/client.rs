//! The object store, as scion uses it: a few blocking calls on the `object_store` crate's S3
//! client, each under a deadline, named by keys below the remote's prefix.
//!
//! Credentials come the standard AWS ways, in the SDKs' order: the daemon's environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; web identity and
//! container credentials), then the mounting user's profile (`AWS_PROFILE` or `default` in
//! `~/.aws/credentials` and `~/.aws/config`, or the files `AWS_SHARED_CREDENTIALS_FILE` and
//! `AWS_CONFIG_FILE` name: static keys only), then instance metadata; the store never holds
//! them.

use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig};
use scion_fs::records::remotes::Remote;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long one call may take, retries included, unless `SCION_REMOTE_DEADLINE_MS` says
/// otherwise: a read of a block the cache lacks gets EIO after this, never a hung mount.
const DEADLINE: Duration = Duration::from_secs(30);
/// Retries of a request that failed in a way worth retrying (5xx, a cut connection).
const RETRIES: usize = 3;

/// The threads every remote's requests run on (two: the daemon's own threads wait on them).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("scion-remote")
            .enable_all()
            .build()
            .expect("the remote's runtime")
    })
}

fn deadline() -> Duration {
    std::env::var("SCION_REMOTE_DEADLINE_MS").ok().and_then(|v| v.parse().ok()).map(Duration::from_millis).unwrap_or(DEADLINE)
}

/// An object as a listing shows it.
#[derive(Clone, Debug)]
pub struct Listed {
    /// Below the remote's prefix.
    pub key: String,
    pub size: u64,
    /// Seconds since the epoch.
    pub modified: i64,
}

/// One remote's object store.
#[derive(Clone)]
pub struct Client {
    store: Arc<AmazonS3>,
    prefix: String,
    name: String,
    deadline: Duration,
}

impl Client {
    pub fn new(r: &Remote) -> Result<Client, String> {
        let retry = RetryConfig {
            max_retries: RETRIES,
            retry_timeout: deadline() / 2,
            backoff: object_store::BackoffConfig { init_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(2), base: 2.0 },
        };
        let opts = ClientOptions::new().with_timeout(deadline() / 2).with_connect_timeout(Duration::from_secs(5)).with_allow_http(true);
        let mut b = AmazonS3Builder::from_env().with_bucket_name(&r.bucket).with_retry(retry).with_client_options(opts);
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
            let p = profile::load();
            if let (Some(k), Some(s)) = (p.key, p.secret) {
                b = b.with_access_key_id(k).with_secret_access_key(s);
                if let Some(t) = p.token {
                    b = b.with_token(t);
                }
            }
            if let (Some(region), None, true) = (p.region, std::env::var_os("AWS_REGION").or(std::env::var_os("AWS_DEFAULT_REGION")), r.region.is_empty()) {
                b = b.with_region(region);
            }
        }
        if !r.region.is_empty() {
            b = b.with_region(&r.region);
        }
        if !r.endpoint.is_empty() {
            b = b.with_endpoint(&r.endpoint).with_allow_http(r.endpoint.starts_with("http://"));
        }
        let store = b.build().map_err(|e| format!("remote {}: {e}", r.name))?;
        Ok(Client { store: Arc::new(store), prefix: r.prefix.clone(), name: r.name.clone(), deadline: deadline() })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn key(&self, k: &str) -> Key {
        match self.prefix.is_empty() {
            true => Key::from(k),
            false => Key::from(format!("{}/{k}", self.prefix)),
        }
    }

    fn run<T>(&self, what: &str, key: &str, f: impl std::future::Future<Output = object_store::Result<T>>) -> Result<T, Error> {
        let r = runtime().block_on(async { tokio::time::timeout(self.deadline, f).await });
        match r {
            Err(_) => Err(Error::Failed(format!("remote {}: {what} {key}: no answer within {:?}", self.name, self.deadline))),
            Ok(Err(object_store::Error::NotFound { .. })) => Err(Error::NotFound),
            Ok(Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. })) => Err(Error::Exists),
            Ok(Err(e)) => Err(Error::Failed(format!("remote {}: {what} {key}: {e}", self.name))),
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// The whole object at `key`.
    pub fn get(&self, key: &str) -> Result<Bytes, Error> {
        let k = self.key(key);
        self.run("get", key, async { self.store.get(&k).await?.bytes().await })
    }

    /// Bytes `start..end` of the object at `key`: exactly that many, or an error.
    pub fn get_range(&self, key: &str, start: u64, end: u64) -> Result<Bytes, Error> {
        let k = self.key(key);
        let b = self.run("ranged get", key, self.store.get_range(&k, start..end))?;
        if b.len() as u64 != end - start {
            return Err(Error::Failed(format!("remote {}: ranged get {key}: {} bytes where {} were asked", self.name, b.len(), end - start)));
        }
        Ok(b)
    }

    /// Writes `bytes` at `key` unless an object is there (conditional put); `false`: one was.
    pub fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<bool, Error> {
        let k = self.key(key);
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.run("put", key, self.store.put_opts(&k, PutPayload::from(bytes), opts)) {
            Ok(_) => Ok(true),
            Err(Error::Exists) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn exists(&self, key: &str) -> Result<bool, Error> {
        let k = self.key(key);
        match self.run("head", key, self.store.head(&k)) {
            Ok(_) => Ok(true),
            Err(Error::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn delete(&self, key: &str) -> Result<(), Error> {
        let k = self.key(key);
        match self.run("delete", key, self.store.delete(&k)) {
            Ok(()) | Err(Error::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every object whose key starts with `dir` (ending in `/`).
    pub fn list(&self, dir: &str) -> Result<Vec<Listed>, Error> {
        let k = self.key(dir.trim_end_matches('/'));
        let strip = match self.prefix.is_empty() {
            true => String::new(),
            false => format!("{}/", self.prefix),
        };
        self.run("list", dir, async {
            let mut out = Vec::new();
            let mut s = self.store.list(Some(&k));
            while let Some(m) = s.next().await {
                let m = m?;
                let key = m.location.as_ref().strip_prefix(&strip).unwrap_or(m.location.as_ref()).to_string();
                out.push(Listed { key, size: m.size, modified: m.last_modified.timestamp() });
            }
            Ok(out)
        })
    }
}

/// Why a call failed.
#[derive(Debug)]
pub enum Error {
    NotFound,
    /// A conditional put found an object there.
    Exists,
    /// Anything else, in words: the remote's name, the call, the key and why.
    Failed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotFound => write!(f, "no such object"),
            Error::Exists => write!(f, "the object exists"),
            Error::Failed(m) => write!(f, "{m}"),
        }
    }
}

/// The mounting user's AWS profile: the static keys of `~/.aws/credentials` and the region of
/// `~/.aws/config` (the INI files every AWS SDK reads; processes, SSO and role chains are the
/// SDKs' own and not read here: give those as environment variables).
mod profile {
    #[derive(Default)]
    pub struct Profile {
        pub key: Option<String>,
        pub secret: Option<String>,
        pub token: Option<String>,
        pub region: Option<String>,
    }

    /// `KEY = VALUE` lines of section `section` of an INI file's text.
    pub fn section(text: &str, section: &str) -> Vec<(String, String)> {
        let mut inside = false;
        let mut out = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                inside = name.trim() == section;
                continue;
            }
            if let (true, Some((k, v))) = (inside, line.split_once('=')) {
                out.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        out
    }

    pub fn load() -> Profile {
        let name = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
        let home = std::env::var("HOME").unwrap_or_default();
        let path = |var: &str, file: &str| std::env::var(var).unwrap_or_else(|_| format!("{home}/.aws/{file}"));
        let read = |p: String| std::fs::read_to_string(p).unwrap_or_default();
        let mut p = Profile::default();
        for (k, v) in section(&read(path("AWS_SHARED_CREDENTIALS_FILE", "credentials")), &name) {
            match k.as_str() {
                "aws_access_key_id" => p.key = Some(v),
                "aws_secret_access_key" => p.secret = Some(v),
                "aws_session_token" => p.token = Some(v),
                _ => {}
            }
        }
        let config_section = if name == "default" { name.clone() } else { format!("profile {name}") };
        for (k, v) in section(&read(path("AWS_CONFIG_FILE", "config")), &config_section) {
            if k == "region" {
                p.region = Some(v);
            }
        }
        p
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn sections_of_the_aws_files_are_read() {
            let text = "[default]\naws_access_key_id = AK\n# note\n[profile ci]\nregion=eu-west-1\n[other]\nx = 1\n";
            assert_eq!(super::section(text, "default"), vec![("aws_access_key_id".to_string(), "AK".to_string())]);
            assert_eq!(super::section(text, "profile ci"), vec![("region".to_string(), "eu-west-1".to_string())]);
            assert!(super::section(text, "missing").is_empty());
        }
    }
}
