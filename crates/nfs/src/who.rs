//! Who a call comes from: its AUTH_SYS credential, squashed as the export says.
//!
//! NFSv3 with AUTH_SYS trusts the client's word for uid and groups; what the server decides
//! is how much to believe. As knfsd does by default, root is mapped to an anonymous user
//! (`root_squash`); `--squash all` maps everyone, `--squash none` no one. Calls without an
//! AUTH_SYS credential (AUTH_NULL) are always the anonymous user.

use nfs3_server::nfs3_types::rpc::auth_unix;
use scion_fs::access::Caller;

/// Whose identity is replaced by the anonymous one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Squash {
    Root,
    All,
    None,
}

impl std::str::FromStr for Squash {
    type Err = String;
    fn from_str(s: &str) -> Result<Squash, String> {
        match s {
            "root" => Ok(Squash::Root),
            "all" => Ok(Squash::All),
            "none" => Ok(Squash::None),
            _ => Err(format!("squash must be root, all or none, not {s:?}")),
        }
    }
}

/// The squash rule and the anonymous identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub squash: Squash,
    /// uid and gid of the anonymous user (65534:65534, `nobody`, by default).
    pub anon: (u32, u32),
}

impl Default for Identity {
    fn default() -> Identity {
        Identity {
            squash: Squash::Root,
            anon: (65534, 65534),
        }
    }
}

/// AUTH_SYS carries at most 16 supplementary groups (RFC 5531).
const MAX_GROUPS: usize = 16;

impl Identity {
    /// The caller a credential stands for.
    pub fn caller(&self, auth: Option<&auth_unix>) -> Caller {
        let anon = Caller {
            uid: self.anon.0,
            gid: self.anon.1,
            groups: Vec::new(),
        };
        let Some(a) = auth else { return anon };
        match self.squash {
            Squash::All => anon,
            Squash::Root if a.uid == 0 => anon,
            _ => Caller {
                uid: a.uid,
                // A squashed group 0 would still be root's group: knfsd maps it too.
                gid: if self.squash == Squash::Root && a.gid == 0 { self.anon.1 } else { a.gid },
                groups: a
                    .gids
                    .iter()
                    .take(MAX_GROUPS)
                    .copied()
                    .filter(|&g| !(self.squash == Squash::Root && g == 0))
                    .collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(uid: u32, gid: u32, gids: &[u32]) -> auth_unix {
        auth_unix {
            uid,
            gid,
            gids: gids.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn squash_rules() {
        let root_squash = Identity::default();
        assert_eq!(root_squash.caller(Some(&cred(0, 0, &[0, 5]))).uid, 65534);
        let bob = root_squash.caller(Some(&cred(1000, 0, &[0, 27])));
        assert_eq!((bob.uid, bob.gid, bob.groups), (1000, 65534, vec![27]));
        assert_eq!(root_squash.caller(None).uid, 65534);
        let none = Identity { squash: Squash::None, anon: (99, 99) };
        assert_eq!(none.caller(Some(&cred(0, 0, &[]))).uid, 0);
        assert_eq!(none.caller(None).uid, 99);
        let all = Identity { squash: Squash::All, anon: (99, 98) };
        let c = all.caller(Some(&cred(1000, 1000, &[1000])));
        assert_eq!((c.uid, c.gid), (99, 98));
        assert!("some".parse::<Squash>().is_err());
    }
}
