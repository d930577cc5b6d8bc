//! POSIX ACLs as Linux stores them in `system.posix_acl_access` / `system.posix_acl_default`
//! (version 2 header, then `tag u16, perm u16, id u32` entries). With FUSE_POSIX_ACL the
//! kernel enforces and caches ACLs, and leaves to the filesystem what a local filesystem does
//! in `posix_acl_create` and `posix_acl_chmod`: inheriting a directory's default ACL, keeping
//! the mode bits and the access ACL in step.

pub const ACCESS: &[u8] = b"system.posix_acl_access";
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER: u16 = 0x20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// Decodes and validates an ACL; `None` if malformed (the kernel validates too).
pub fn parse(v: &[u8]) -> Option<Vec<Entry>> {
    if v.len() < 4 || (v.len() - 4) % 8 != 0 || u32::from_le_bytes(v[..4].try_into().ok()?) != VERSION {
        return None;
    }
    let e: Vec<Entry> = v[4..]
        .chunks(8)
        .map(|c| Entry {
            tag: u16::from_le_bytes([c[0], c[1]]),
            perm: u16::from_le_bytes([c[2], c[3]]),
            id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    let has = |t| e.iter().filter(|x| x.tag == t).count();
    let known = e
        .iter()
        .all(|x| matches!(x.tag, USER_OBJ | USER | GROUP_OBJ | GROUP | MASK | OTHER) && x.perm <= 7);
    if !known || has(USER_OBJ) != 1 || has(GROUP_OBJ) != 1 || has(OTHER) != 1 || has(MASK) > 1 {
        return None;
    }
    if (has(USER) + has(GROUP) > 0) && has(MASK) == 0 {
        return None;
    }
    Some(e)
}

pub fn encode(e: &[Entry]) -> Vec<u8> {
    let mut v = VERSION.to_le_bytes().to_vec();
    for x in e {
        v.extend_from_slice(&x.tag.to_le_bytes());
        v.extend_from_slice(&x.perm.to_le_bytes());
        v.extend_from_slice(&x.id.to_le_bytes());
    }
    v
}

/// The rwx bits an access ACL gives the owner, group class and others, and whether the ACL
/// says no more than those bits (then no ACL needs storing).
pub fn equiv_mode(e: &[Entry]) -> (u16, bool) {
    let mut mode = 0u16;
    let mut equiv = true;
    for x in e {
        match x.tag {
            USER_OBJ => mode |= x.perm << 6,
            GROUP_OBJ => mode |= x.perm << 3,
            OTHER => mode |= x.perm,
            MASK => {
                mode = (mode & !0o070) | (x.perm << 3);
                equiv = false;
            }
            _ => equiv = false,
        }
    }
    // The mask, if any, came after GROUP_OBJ in canonical order but may not in the input.
    if let Some(m) = e.iter().find(|x| x.tag == MASK) {
        mode = (mode & !0o070) | (m.perm << 3);
    }
    (mode, equiv)
}

/// `posix_acl_chmod`: a new mode rewrites the owner, group class (mask if present) and other
/// entries of an access ACL.
pub fn chmod(e: &mut [Entry], mode: u16) {
    let has_mask = e.iter().any(|x| x.tag == MASK);
    for x in e.iter_mut() {
        match x.tag {
            USER_OBJ => x.perm = (mode >> 6) & 7,
            GROUP_OBJ if !has_mask => x.perm = (mode >> 3) & 7,
            MASK => x.perm = (mode >> 3) & 7,
            OTHER => x.perm = mode & 7,
            _ => {}
        }
    }
}

/// `posix_acl_create`: a new inode in a directory with default ACL `default` and requested
/// mode `mode` gets the returned permission bits, and the returned access ACL if it says
/// more than those bits. (Without a default ACL the umask applies instead.)
pub fn create(default: &[Entry], mode: u16) -> (u16, Option<Vec<Entry>>) {
    let mut acl = default.to_vec();
    let mut mode = mode & 0o7777;
    let mut not_equiv = false;
    let mut group_obj = None;
    let mut mask_obj = None;
    for (i, x) in acl.iter_mut().enumerate() {
        match x.tag {
            USER_OBJ => {
                x.perm &= (mode >> 6) & 7;
                mode &= (x.perm << 6) | !0o700;
            }
            USER | GROUP => not_equiv = true,
            GROUP_OBJ => group_obj = Some(i),
            OTHER => {
                x.perm &= mode & 7;
                mode &= x.perm | !0o007;
            }
            MASK => {
                mask_obj = Some(i);
                not_equiv = true;
            }
            _ => {}
        }
    }
    if let Some(i) = mask_obj.or(group_obj) {
        let x = &mut acl[i];
        x.perm &= (mode >> 3) & 7;
        mode &= (x.perm << 3) | !0o070;
    }
    (mode, not_equiv.then_some(acl))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> Entry {
        Entry { tag, perm, id }
    }

    #[test]
    fn create_from_default_masks_by_mode() {
        // default: u::rwx, u:1000:rwx, g::r-x, m::rwx, o::---
        let d = vec![
            e(USER_OBJ, 7, u32::MAX),
            e(USER, 7, 1000),
            e(GROUP_OBJ, 5, u32::MAX),
            e(MASK, 7, u32::MAX),
            e(OTHER, 0, u32::MAX),
        ];
        let (mode, acl) = create(&d, 0o666);
        assert_eq!(mode, 0o660);
        let acl = acl.unwrap();
        assert_eq!(acl[0].perm, 6);
        assert_eq!(acl[3].perm, 6, "mask limited by the group bits of the mode");
        assert_eq!(parse(&encode(&acl)).unwrap(), acl);
        // A minimal default ACL gives a mode, no access ACL.
        let d = vec![
            e(USER_OBJ, 7, u32::MAX),
            e(GROUP_OBJ, 5, u32::MAX),
            e(OTHER, 5, u32::MAX),
        ];
        assert_eq!(create(&d, 0o777), (0o755, None));
    }

    #[test]
    fn equiv_and_chmod() {
        let mut a = vec![
            e(USER_OBJ, 6, 0),
            e(USER, 7, 5),
            e(GROUP_OBJ, 4, 0),
            e(MASK, 5, 0),
            e(OTHER, 0, 0),
        ];
        assert_eq!(equiv_mode(&a), (0o650, false));
        chmod(&mut a, 0o741);
        assert_eq!(equiv_mode(&a), (0o741, false));
        assert_eq!(a[2].perm, 4, "group entry kept when a mask exists");
        let m = vec![e(USER_OBJ, 7, 0), e(GROUP_OBJ, 5, 0), e(OTHER, 4, 0)];
        assert_eq!(equiv_mode(&m), (0o754, true));
        assert!(parse(b"\x02\x00\x00\x00").is_none());
        assert!(
            parse(&encode(&[
                e(USER_OBJ, 7, 0),
                e(USER, 7, 1),
                e(GROUP_OBJ, 5, 0),
                e(OTHER, 0, 0)
            ]))
            .is_none(),
            "named entry without a mask"
        );
    }
}
