use scion_store::codec::{Reader, Writer};
use scion_store::{BlockPtr, Result};
use std::collections::HashMap;

/// Reference counts of blocks, storing only counts above one: a live block absent from the
/// table has exactly one reference, which keeps the table as small as the sharing is.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct RefTable {
    shared: HashMap<u64, u32>,
}

impl RefTable {
    pub fn get(&self, addr: u64) -> u32 {
        self.shared.get(&addr).copied().unwrap_or(1)
    }
    pub fn inc(&mut self, ptr: &BlockPtr) {
        *self.shared.entry(ptr.addr).or_insert(1) += 1;
    }
    /// Drops one reference; returns the count left (0: the block is dead).
    pub fn dec(&mut self, ptr: &BlockPtr) -> u32 {
        match self.shared.get_mut(&ptr.addr) {
            None => 0,
            Some(n) => {
                *n -= 1;
                let left = *n;
                if left <= 1 {
                    self.shared.remove(&ptr.addr);
                }
                left
            }
        }
    }
    pub fn len(&self) -> usize {
        self.shared.len()
    }
    pub fn is_empty(&self) -> bool {
        self.shared.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.shared.iter().map(|(a, n)| (*a, *n))
    }
    pub fn encode(&self, w: &mut Writer) {
        let mut v: Vec<_> = self.iter().collect();
        v.sort();
        w.u32(v.len() as u32);
        for (a, n) in v {
            w.u64(a).u32(n);
        }
    }
    pub fn decode(r: &mut Reader<'_>) -> Result<RefTable> {
        let n = r.count(12)?;
        let mut shared = HashMap::with_capacity(n);
        for _ in 0..n {
            let a = r.u64()?;
            let c = r.u32()?;
            shared.insert(a, c);
        }
        Ok(RefTable { shared })
    }
}
