use scion_store::codec::{Reader, Writer};
use scion_store::{BlockPtr, Result};
use std::collections::HashMap;

/// Reference counts of blocks, storing only counts above one: a live block absent from the
/// table has exactly one reference, which keeps the table as small as the sharing is.
///
/// The table also remembers which counts changed since `take_changes` last ran, and what
/// each was then, so that a checkpoint writes only the entries that differ (a tree of them,
/// format 18) instead of the whole table.
#[derive(Default, Clone, Debug)]
pub struct RefTable {
    shared: HashMap<u64, u32>,
    /// Counts touched since the last `take_changes`, with their value then.
    was: HashMap<u64, u32>,
}

impl PartialEq for RefTable {
    fn eq(&self, other: &Self) -> bool {
        self.shared == other.shared
    }
}
impl Eq for RefTable {}

impl RefTable {
    pub fn get(&self, addr: u64) -> u32 {
        self.shared.get(&addr).copied().unwrap_or(1)
    }
    pub fn inc(&mut self, ptr: &BlockPtr) {
        self.touch(ptr.addr);
        *self.shared.entry(ptr.addr).or_insert(1) += 1;
    }
    /// Drops one reference; returns the count left (0: the block is dead).
    pub fn dec(&mut self, ptr: &BlockPtr) -> u32 {
        match self.shared.get_mut(&ptr.addr) {
            None => 0,
            Some(n) => {
                let before = *n;
                *n -= 1;
                let left = *n;
                if left <= 1 {
                    self.shared.remove(&ptr.addr);
                }
                self.was.entry(ptr.addr).or_insert(before);
                left
            }
        }
    }
    fn touch(&mut self, addr: u64) {
        let now = self.get(addr);
        self.was.entry(addr).or_insert(now);
    }
    /// The counts that differ from what they were at the last call (or since the table was
    /// loaded), sorted by address: `(addr, count)`, a count of one meaning "no entry".
    pub fn take_changes(&mut self) -> Vec<(u64, u32)> {
        let was = std::mem::take(&mut self.was);
        let mut v: Vec<(u64, u32)> = was
            .into_iter()
            .map(|(a, before)| (a, before, self.get(a)))
            .filter(|&(_, before, now)| before != now)
            .map(|(a, _, now)| (a, now))
            .collect();
        v.sort_unstable();
        v
    }
    /// Makes every entry a change (a table read from the flat list of a format before 18,
    /// whose first checkpoint writes it whole as a tree).
    pub fn mark_all_changed(&mut self) {
        self.was = self.shared.keys().map(|&a| (a, 1)).collect();
    }
    /// Whether a count differs from what it was at the last `take_changes`.
    pub fn has_changes(&self) -> bool {
        self.was.iter().any(|(&a, &before)| self.get(a) != before)
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
        Ok(RefTable { shared, was: HashMap::new() })
    }

    /// Key and value of `addr`'s entry in the tree of counts (format 18): the address
    /// big-endian (so the tree's order is the addresses'), the count little-endian.
    pub fn entry_bytes(addr: u64, count: u32) -> ([u8; 8], [u8; 4]) {
        (addr.to_be_bytes(), count.to_le_bytes())
    }

    /// Decodes one entry of the tree of counts; a count must be above one.
    pub fn decode_entry(key: &[u8], value: &[u8]) -> Result<(u64, u32)> {
        let bad = |why: &str| scion_store::Error::corrupt("reference tree", "entry", why.to_string());
        let k: [u8; 8] = key.try_into().map_err(|_| bad("key is not 8 bytes"))?;
        let v: [u8; 4] = value.try_into().map_err(|_| bad("value is not 4 bytes"))?;
        let n = u32::from_le_bytes(v);
        if n < 2 {
            return Err(bad("a count below two"));
        }
        Ok((u64::from_be_bytes(k), n))
    }

    /// A table of the entries of a tree of counts (`decode_entry`'s), with nothing changed.
    pub fn from_entries(entries: impl IntoIterator<Item = (u64, u32)>) -> RefTable {
        RefTable { shared: entries.into_iter().collect(), was: HashMap::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scion_store::BlockKind;

    fn ptr(addr: u64) -> BlockPtr {
        BlockPtr { addr, len: 4096, kind: BlockKind::Data, hash: [0; 32] }
    }

    #[test]
    fn changes_are_the_counts_that_differ() {
        let mut t = RefTable::default();
        t.inc(&ptr(1)); // 2
        t.inc(&ptr(1)); // 3
        t.inc(&ptr(2)); // 2
        t.dec(&ptr(2)); // back to 1: no change
        t.inc(&ptr(3));
        assert!(t.has_changes());
        assert_eq!(t.take_changes(), vec![(1, 3), (3, 2)]);
        assert!(t.take_changes().is_empty());
        t.inc(&ptr(5));
        t.dec(&ptr(5));
        assert!(!t.has_changes(), "a count back where it was");
        t.dec(&ptr(1)); // 2
        t.dec(&ptr(3)); // 1: the entry goes
        t.inc(&ptr(4));
        t.dec(&ptr(4));
        assert_eq!(t.take_changes(), vec![(1, 2), (3, 1)]);
        t.mark_all_changed();
        assert_eq!(t.take_changes(), vec![(1, 2)]);
    }

    #[test]
    fn entries_round_trip_and_refuse_bad_bytes() {
        let (k, v) = RefTable::entry_bytes(0x1234_5678_9abc, 7);
        assert_eq!(RefTable::decode_entry(&k, &v).unwrap(), (0x1234_5678_9abc, 7));
        assert!(RefTable::decode_entry(&k, &1u32.to_le_bytes()).is_err());
        assert!(RefTable::decode_entry(&k[..7], &v).is_err());
        assert!(RefTable::decode_entry(&k, &[1, 2, 3]).is_err());
    }
}
