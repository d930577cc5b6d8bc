//! Node encoding. A leaf: `level=0 u8, count u32, then per entry: key (u16 len + bytes),
//! value bytes (u32 len + bytes), pointer count u8, pointers`. An internal node:
//! `level u8 (>=1), count u32, then per child: key (u16 len + bytes), pointer`.

use bytes::Bytes;
use scion_store::codec::{Reader, Writer};
use scion_store::{BlockPtr, Error, Result, PTR_LEN};

pub const MAX_KEY_LEN: usize = 4096;

/// A value: bytes, plus the blocks it owns a reference to.
///
/// The bytes are shared (`Bytes`), so that a node rewritten by a fold takes its unchanged
/// values from the old node without copying them: a leaf holds small files' records with
/// their bytes, and copying each unchanged one was a fifth of a fold's time under the
/// engine lock (docs/benchmarks.md, "What a pile of rewrites costs to fold"). Each value
/// owns its own buffer (decoding copies it out of the block), so a value kept by a new node
/// never keeps an old node's whole block alive.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Value {
    pub bytes: Bytes,
    pub ptrs: Vec<BlockPtr>,
}

impl Value {
    pub fn new(bytes: Vec<u8>, ptrs: Vec<BlockPtr>) -> Value {
        Value { bytes: Bytes::from(bytes), ptrs }
    }
    fn encoded_len(&self) -> usize {
        4 + self.bytes.len() + 1 + self.ptrs.len() * PTR_LEN
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Leaf(Vec<(Vec<u8>, Value)>),
    /// Children with the smallest key each holds, in key order.
    Internal {
        level: u8,
        children: Vec<(Vec<u8>, BlockPtr)>,
    },
}

impl Node {
    /// The memory the decoded node takes, roughly: its vectors' buffers and what each key
    /// and value holds (allocator rounding not counted). A value's bytes count with the
    /// header `Bytes` allocates once they are shared (`SHARED`), so that the node cache's
    /// bound holds whether or not a value was handed out.
    pub fn memory(&self) -> usize {
        const VEC: usize = std::mem::size_of::<Vec<u8>>();
        const PTR: usize = std::mem::size_of::<BlockPtr>();
        const ENTRY: usize = std::mem::size_of::<(Vec<u8>, Value)>();
        const SHARED: usize = 32;
        std::mem::size_of::<Node>()
            + match self {
                Node::Leaf(es) => es
                    .iter()
                    .map(|(k, v)| ENTRY + k.capacity() + SHARED + v.bytes.len() + v.ptrs.capacity() * PTR)
                    .sum::<usize>(),
                Node::Internal { children, .. } => children.iter().map(|(k, _)| VEC + PTR + k.capacity()).sum(),
            }
    }

    pub fn level(&self) -> u8 {
        match self {
            Node::Leaf(_) => 0,
            Node::Internal { level, .. } => *level,
        }
    }
    pub fn min_key(&self) -> &[u8] {
        match self {
            Node::Leaf(e) => e.first().map(|(k, _)| k.as_slice()).unwrap_or(&[]),
            Node::Internal { children, .. } => children.first().map(|(k, _)| k.as_slice()).unwrap_or(&[]),
        }
    }
    /// Every block this node holds a reference to.
    pub fn child_ptrs(&self) -> Vec<BlockPtr> {
        match self {
            Node::Leaf(e) => e.iter().flat_map(|(_, v)| v.ptrs.iter().copied()).collect(),
            Node::Internal { children, .. } => children.iter().map(|(_, p)| *p).collect(),
        }
    }
    /// Appends the node's bytes to `out` (a block's buffer, `BlockStore::write_deferred_with`).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let mut w = Writer { buf: std::mem::take(out) };
        match self {
            Node::Leaf(entries) => {
                w.u8(0).u32(entries.len() as u32);
                for (k, v) in entries {
                    w.u16(k.len() as u16).raw(k).bytes(&v.bytes).u8(v.ptrs.len() as u8);
                    for p in &v.ptrs {
                        p.encode(&mut w);
                    }
                }
            }
            Node::Internal { level, children } => {
                w.u8(*level).u32(children.len() as u32);
                for (k, p) in children {
                    w.u16(k.len() as u16).raw(k);
                    p.encode(&mut w);
                }
            }
        }
        *out = w.finish();
    }
    pub fn decode(bytes: &[u8]) -> Result<Node> {
        let mut r = Reader::new(bytes, "tree node");
        let level = r.u8()?;
        let node = if level == 0 {
            let n = r.count(7)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let kl = r.u16()? as usize;
                let k = r.raw(kl)?.to_vec();
                let b = Bytes::copy_from_slice(r.bytes()?);
                let np = r.u8()? as usize;
                let mut ptrs = Vec::with_capacity(np.min(r.remaining() / PTR_LEN));
                for _ in 0..np {
                    ptrs.push(BlockPtr::decode(&mut r)?);
                }
                entries.push((k, Value { bytes: b, ptrs }));
            }
            Node::Leaf(entries)
        } else {
            let n = r.count(2 + PTR_LEN)?;
            let mut children = Vec::with_capacity(n);
            for _ in 0..n {
                let kl = r.u16()? as usize;
                let k = r.raw(kl)?.to_vec();
                children.push((k, BlockPtr::decode(&mut r)?));
            }
            Node::Internal { level, children }
        };
        r.expect_end()?;
        if level > 32 {
            return Err(Error::corrupt(
                "tree node",
                "header",
                format!("level {level} is impossible"),
            ));
        }
        Ok(node)
    }

    /// Splits into nodes of about `target` encoded bytes each (an empty node gives none).
    pub fn split(self, target: usize) -> Vec<Node> {
        let mut parts = Vec::new();
        match self {
            Node::Leaf(entries) => {
                let mut cur = Vec::new();
                let mut size = 5;
                for (k, v) in entries {
                    let l = 2 + k.len() + v.encoded_len();
                    if !cur.is_empty() && size + l > target {
                        parts.push(Node::Leaf(std::mem::take(&mut cur)));
                        size = 5;
                    }
                    size += l;
                    cur.push((k, v));
                }
                if !cur.is_empty() {
                    parts.push(Node::Leaf(cur));
                }
            }
            Node::Internal { level, children } => {
                let mut cur = Vec::new();
                let mut size = 5;
                for (k, p) in children {
                    let l = 2 + k.len() + PTR_LEN;
                    if cur.len() >= 2 && size + l > target {
                        parts.push(Node::Internal {
                            level,
                            children: std::mem::take(&mut cur),
                        });
                        size = 5;
                    }
                    size += l;
                    cur.push((k, p));
                }
                if !cur.is_empty() {
                    parts.push(Node::Internal { level, children: cur });
                }
            }
        }
        parts
    }
}
