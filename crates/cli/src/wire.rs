//! Bytes the CLI takes from other processes and from users, decoded without trusting them:
//! the control protocol between `scion` commands and a mounted store's daemon, and clone
//! templates. Kept apart from the commands so the fuzz targets (`fuzz/`) can reach them.
//!
//! A control message is a frame `len u32` + body (at most `MAX_MESSAGE` bytes); a request
//! body is `magic SCNC, version u8, op u8, count u32, then count fields (len u32 + bytes)`.

use std::io::{Read, Write};
use std::path::PathBuf;

const MAGIC: &[u8; 4] = b"SCNC";
const VERSION: u8 = 1;
pub const MAX_MESSAGE: usize = 1 << 20;
pub const MAX_FIELDS: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// src, dst, excludes...
    Clone = 1,
    /// path, name
    Snapshot = 2,
    /// path
    Destroy = 3,
    List = 4,
    Scrub = 5,
    /// path, budget in bytes (decimal text)
    Repack = 6,
    /// no fields; the reply is the daemon's mount device (`major:minor`)
    Identify = 7,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub fields: Vec<Vec<u8>>,
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.push(VERSION);
        b.push(self.op as u8);
        b.extend_from_slice(&(self.fields.len() as u32).to_le_bytes());
        for f in &self.fields {
            b.extend_from_slice(&(f.len() as u32).to_le_bytes());
            b.extend_from_slice(f);
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Request, String> {
        let mut r = b;
        let mut take = |n: usize| -> Result<&[u8], String> {
            if r.len() < n {
                return Err("truncated request".into());
            }
            let (a, rest) = r.split_at(n);
            r = rest;
            Ok(a)
        };
        if take(4)? != MAGIC {
            return Err("not a scion control request".into());
        }
        let v = take(1)?[0];
        if v != VERSION {
            return Err(format!(
                "control protocol version {v} is not supported (this daemon speaks {VERSION})"
            ));
        }
        let op = match take(1)?[0] {
            1 => Op::Clone,
            2 => Op::Snapshot,
            3 => Op::Destroy,
            4 => Op::List,
            5 => Op::Scrub,
            6 => Op::Repack,
            7 => Op::Identify,
            o => return Err(format!("unknown operation {o}")),
        };
        let n = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
        if n > MAX_FIELDS {
            return Err(format!("{n} fields, more than {MAX_FIELDS}"));
        }
        let mut fields = Vec::with_capacity(n);
        for _ in 0..n {
            let len = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
            fields.push(take(len)?.to_vec());
        }
        if !r.is_empty() {
            return Err("trailing bytes after the request".into());
        }
        Ok(Request { op, fields })
    }
}

pub fn write_frame(s: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    s.write_all(&(body.len() as u32).to_le_bytes())?;
    s.write_all(body)
}

pub fn read_frame(s: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut l = [0u8; 4];
    s.read_exact(&mut l)?;
    let len = u32::from_le_bytes(l) as usize;
    if len > MAX_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("message of {len} bytes exceeds {MAX_MESSAGE}"),
        ));
    }
    let mut b = vec![0u8; len];
    s.read_exact(&mut b)?;
    Ok(b)
}

/// A clone template: `scion clone --template FILE` (TOML).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Template {
    pub source: PathBuf,
    pub destination: PathBuf,
    #[serde(default)]
    pub exclude: Vec<PathBuf>,
}

/// Largest template file read: a template names two paths and some exclusions.
pub const MAX_TEMPLATE: usize = 1 << 20;

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        if text.len() > MAX_TEMPLATE {
            return Err(format!("{} bytes, more than {MAX_TEMPLATE}", text.len()));
        }
        toml::from_str(text).map_err(|e| e.to_string())
    }
}
