//! `mount -t fuse.scion STORE MOUNTPOINT -o OPTIONS` and `/etc/fstab` (issue 22 item 1).
//! mount(8) runs `/sbin/mount.fuse.scion` if it is installed (a link to `scion`), else
//! fuse3's `mount.fuse`, which runs `scion STORE MOUNTPOINT -o OPTIONS`. Both forms become
//! `scion mount -o OPTIONS STORE MOUNTPOINT`, without the options that are fstab's and
//! mount(8)'s own (`defaults`, `noauto`, `user`, `nofail`, `_netdev`, `x-systemd.*`...),
//! which have done their work before scion runs.

use std::ffi::OsString;
use std::path::Path;

/// Options that only fstab and mount(8) read.
pub(crate) fn fstab_only(o: &str) -> bool {
    matches!(o, "defaults" | "auto" | "noauto" | "user" | "users" | "nouser" | "owner" | "group" | "nofail" | "_netdev" | "rw")
        || o.starts_with("x-")
        || o.starts_with("comment=")
}

/// The arguments as `scion` reads them: `args` itself, or, for the mount helper's forms, the
/// `scion mount` command they mean.
pub fn args(args: Vec<OsString>) -> Vec<OsString> {
    let helper = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("mount."));
    // `scion STORE MOUNTPOINT ...`: the first argument is a store (or `scion:STORE`), not a
    // command.
    let bare = args.len() >= 3
        && args.get(1).is_some_and(|a| crate::mount::store_arg(Path::new(a)).join("superblock").is_file());
    if !helper && !bare {
        return args;
    }
    let mut positional = Vec::new();
    let mut options: Vec<String> = Vec::new();
    let mut verbose = false;
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => {
                if let Some(o) = it.next() {
                    let o = o.to_string_lossy();
                    // A remount's `rw` is the change asked for, not fstab's default.
                    let remount = o.split(',').any(|x| x == "remount");
                    options.extend(o.split(',').filter(|o| !o.is_empty() && (!fstab_only(o) || remount && *o == "rw")).map(str::to_string));
                }
            }
            // mount(8)'s: a type, a namespace, no mtab, fake, verbose, sloppy.
            Some("-t" | "-N") => {
                it.next();
            }
            // Verbose: say what was mounted, as `scion mount` does; helpers are silent otherwise.
            Some("-v") => verbose = true,
            Some("-n" | "-f" | "-s") => {}
            _ => positional.push(a),
        }
    }
    let mut out: Vec<OsString> = vec!["scion".into(), "mount".into()];
    if !verbose {
        out.push("--quiet".into());
    }
    if !options.is_empty() {
        out.push("-o".into());
        out.push(options.join(",").into());
    }
    out.extend(positional);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn helper_forms_become_scion_mount_without_fstab_options() {
        let got = args(v(&[
            "/sbin/mount.fuse.scion",
            "/srv/store",
            "/srv/mnt",
            "-o",
            "rw,defaults,allow_other,_netdev,nofail,x-systemd.requires=a.mount,snapdir=visible",
            "-n",
        ]));
        assert_eq!(got, v(&["scion", "mount", "--quiet", "-o", "allow_other,snapdir=visible", "/srv/store", "/srv/mnt"]));
        let got = args(v(&["mount.fuse.scion", "/s", "/m", "-o", "defaults"]));
        assert_eq!(got, v(&["scion", "mount", "--quiet", "/s", "/m"]));
        // mount(8)'s -v: say what was mounted.
        let got = args(v(&["mount.fuse.scion", "scion:/s", "/m", "-v"]));
        assert_eq!(got, v(&["scion", "mount", "scion:/s", "/m"]));
        // Anything else is left to clap.
        let plain = v(&["scion", "list", "/m"]);
        assert_eq!(args(plain.clone()), plain);
    }
}
