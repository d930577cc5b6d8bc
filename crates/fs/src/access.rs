//! Permission checks the engine makes itself. The kernel checks every request against the
//! inode it names (`default_permissions`), but a path through `.snapshot` leads into a
//! directory as it was, past ancestors that are not on today's path: their search
//! permission as it was then is checked here, for the caller of the lookup.

use crate::acl;
use crate::inode::Inode;

/// Who makes a request: what the kernel's permission checks go by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Caller {
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Read, write and execute (search) bits, as `may` takes them.
pub const R: u16 = 4;
pub const W: u16 = 2;
pub const X: u16 = 1;

/// Whether `caller` may search (execute) directory `dir` (see `may`).
pub fn may_search(caller: &Caller, dir: &Inode) -> bool {
    may(caller, dir, X)
}

/// Whether `caller` has every bit of `want` (`R`, `W`, `X`) on `dir` (a directory, or a file
/// for `R` and `W`), as the kernel's `generic_permission` decides: root always (CAP_DAC_OVERRIDE and
/// CAP_DAC_READ_SEARCH); else the owner's bits, the access ACL's named users and groups under
/// its mask, the group's bits, the others'.
pub fn may(caller: &Caller, dir: &Inode, want: u16) -> bool {
    debug_assert!(want != 0 && want <= 7, "permission bits {want}");
    let has = |bits: u16| bits & want == want;
    if caller.uid == 0 {
        return true;
    }
    if caller.uid == dir.uid {
        return has(dir.perm >> 6 & 7);
    }
    let acl = dir.xattrs.get(acl::ACCESS).and_then(|v| acl::parse(v));
    let Some(acl) = acl else {
        let bits = if caller.in_group(dir.gid) {
            dir.perm >> 3
        } else {
            dir.perm
        };
        return has(bits & 7);
    };
    // The mask limits named users, the owning group and named groups.
    let mask = acl.iter().find(|e| e.tag == acl::MASK).map_or(7, |e| e.perm);
    if let Some(e) = acl.iter().find(|e| e.tag == acl::USER && e.id == caller.uid) {
        return has(e.perm & mask);
    }
    let groups: Vec<u16> = acl
        .iter()
        .filter(|e| {
            (e.tag == acl::GROUP_OBJ && caller.in_group(dir.gid)) || (e.tag == acl::GROUP && caller.in_group(e.id))
        })
        .map(|e| e.perm)
        .collect();
    if !groups.is_empty() {
        return groups.iter().any(|p| has(p & mask));
    }
    acl.iter().find(|e| e.tag == acl::OTHER).is_some_and(|e| has(e.perm))
}

impl crate::Fs {
    /// Whether `caller` has every bit of `want` on `ino` (`may`), from its record with its
    /// ACL; a `.snapshot` directory answers as the directory it lists.
    pub fn permits(&self, ino: crate::Ino, caller: &Caller, want: u16) -> crate::FsResult<bool> {
        let n = self.node(ino & !crate::clone::SNAPDIR_BIT)?;
        Ok(may(caller, &n.inode, want))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(perm: u16, uid: u32, gid: u32, acl: Option<&[(u16, u16, u32)]>) -> Inode {
        let mut i = Inode::new(2, crate::inode::Kind::Dir, perm, uid, gid, crate::inode::Ts::default());
        if let Some(a) = acl {
            let e: Vec<acl::Entry> = a.iter().map(|&(tag, perm, id)| acl::Entry { tag, perm, id }).collect();
            i.xattrs.insert(acl::ACCESS.to_vec(), acl::encode(&e));
        }
        i
    }

    #[test]
    fn search_follows_mode_and_acl() {
        let bob = Caller {
            uid: 1000,
            gid: 1000,
            groups: vec![],
        };
        let mallory = Caller {
            uid: 1001,
            gid: 1001,
            groups: vec![50],
        };
        let root = Caller::default();
        let private = dir(0o700, 1000, 1000, None);
        assert!(may_search(&bob, &private));
        assert!(!may_search(&mallory, &private));
        assert!(may_search(&root, &private));
        assert!(may_search(&mallory, &dir(0o711, 1000, 1000, None)));
        assert!(may_search(&mallory, &dir(0o710, 1000, 50, None)), "supplementary group");
        assert!(
            !may_search(&mallory, &dir(0o701, 1000, 50, None)),
            "group bits, not other"
        );
        // The owner's own bits rule even when others have more.
        assert!(!may_search(&bob, &dir(0o077, 1000, 1000, None)));
        let acl = [
            (acl::USER_OBJ, 7, 0),
            (acl::USER, 1, 1001),
            (acl::GROUP_OBJ, 0, 0),
            (acl::MASK, 1, 0),
            (acl::OTHER, 0, 0),
        ];
        assert!(may_search(&mallory, &dir(0o710, 1000, 1000, Some(&acl))), "named user");
        let masked = [
            (acl::USER_OBJ, 7, 0),
            (acl::USER, 1, 1001),
            (acl::GROUP_OBJ, 0, 0),
            (acl::MASK, 0, 0),
            (acl::OTHER, 1, 0),
        ];
        assert!(!may_search(&mallory, &dir(0o701, 1000, 1000, Some(&masked))), "mask");
        // Several bits: all of them.
        assert!(may(&bob, &dir(0o700, 1000, 1000, None), R | W | X));
        assert!(!may(&bob, &dir(0o500, 1000, 1000, None), R | W));
        assert!(may(&mallory, &dir(0o705, 1000, 1000, None), R | X));
        assert!(!may(&mallory, &dir(0o701, 1000, 1000, None), R));
        assert!(may(&root, &dir(0o000, 1000, 1000, None), R | W | X));
    }
}
