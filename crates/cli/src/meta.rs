//! What a user sees of a file besides its content, read and set through a mount: mode,
//! owner, mtime, extended attributes (`scion run --apply`, `scion send`, `scion receive`).

use scion::stream::Meta;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The metadata of `p` (not following a symlink).
pub fn read(p: &Path) -> Result<Meta, String> {
    let err = |e: std::io::Error| format!("{}: {e}", p.display());
    let m = p.symlink_metadata().map_err(err)?;
    Ok(Meta {
        perm: (m.mode() & 0o7777) as u16,
        uid: m.uid(),
        gid: m.gid(),
        mtime_sec: m.mtime(),
        mtime_nsec: m.mtime_nsec() as u32,
        xattrs: xattrs(p).map_err(err)?,
    })
}

/// Sets `m` on `p` (not following a symlink): owner, mode (not on a symlink), extended
/// attributes (exactly these). Times are left as they are.
pub fn apply(p: &Path, m: &Meta) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{}: {e}", p.display());
    let now = p.symlink_metadata().map_err(err)?;
    if (m.uid, m.gid) != (now.uid(), now.gid()) {
        std::os::unix::fs::lchown(p, Some(m.uid), Some(m.gid)).map_err(err)?;
    }
    let link = now.file_type().is_symlink();
    if !link {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(u32::from(m.perm))).map_err(err)?;
        let have = xattrs(p).map_err(err)?;
        for (k, _) in have.iter().filter(|(k, _)| !m.xattrs.iter().any(|(w, _)| w == k)) {
            xattr_call(p, k, None).map_err(err)?;
        }
        for (k, v) in &m.xattrs {
            if !have.iter().any(|(h, hv)| h == k && hv == v) {
                xattr_call(p, k, Some(v)).map_err(err)?;
            }
        }
    }
    Ok(())
}

fn cpath(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_bytes()).expect("no NUL in a path")
}

/// Every extended attribute of `p` (not following a symlink), sorted by name.
pub fn xattrs(p: &Path) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = cpath(p);
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: the buffer is as long as said; the kernel writes at most that much.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cn = std::ffi::CString::new(name).expect("names end at NUL");
        let mut v = vec![0u8; 64 << 10];
        // SAFETY: as above.
        let m = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        if m < 0 {
            return Err(std::io::Error::last_os_error());
        }
        v.truncate(m as usize);
        out.push((name.to_vec(), v));
    }
    out.sort();
    Ok(out)
}

/// Sets (`Some`) or removes (`None`) extended attribute `name` of `p`, errors in words.
pub fn set_xattr(p: &Path, name: &[u8], value: Option<&[u8]>) -> Result<(), String> {
    xattr_call(p, name, value).map_err(|e| format!("{}: {e}", p.display()))
}

/// Sets (`Some`) or removes (`None`) extended attribute `name` of `p`.
fn xattr_call(p: &Path, name: &[u8], value: Option<&[u8]>) -> std::io::Result<()> {
    let (c, cn) = (cpath(p), std::ffi::CString::new(name).expect("names end at NUL"));
    // SAFETY: valid C strings and a buffer of the length given.
    let r = unsafe {
        match value {
            Some(v) => libc::lsetxattr(c.as_ptr(), cn.as_ptr(), v.as_ptr().cast(), v.len(), 0),
            None => libc::lremovexattr(c.as_ptr(), cn.as_ptr()),
        }
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
