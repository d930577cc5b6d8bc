//! `renameat2(RENAME_WHITEOUT)`: the rename, and a whiteout (a character device 0/0) left at
//! the old name, as one change. overlayfs needs it of an upper layer it reaches through a
//! revalidating (network or FUSE) filesystem: with it, scion can hold a container engine's
//! layers and a container's writable layer.

use crate::fs::{check_name, Fs, MAX_OID};
use crate::inode::Kind;
use crate::{errno, FsResult, Ino, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT};

impl Fs {
    /// Renames `parent/name` to `newparent/newname` (`RENAME_NOREPLACE` may go with it) and
    /// makes `parent/name` a whiteout owned by `uid`:`gid` (the caller, as ext4 has it). The
    /// kernel has checked CAP_MKNOD. Journaled as two records that recovery replays both or
    /// neither of.
    #[allow(clippy::too_many_arguments)]
    pub fn rename_whiteout(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
        uid: u32,
        gid: u32,
    ) -> FsResult<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_WHITEOUT) != 0 || flags & RENAME_EXCHANGE != 0 || flags & RENAME_WHITEOUT == 0 {
            return Err(errno::EINVAL);
        }
        self.writable()?;
        check_name(name)?;
        check_name(newname)?;
        self.rw(parent)?;
        self.rw(newparent)?;
        let src = self.child(parent, name)?.ok_or(errno::ENOENT)?;
        if self.child(newparent, newname)? == Some(src) {
            return Ok(()); // two names of one inode: the VFS changes nothing, and so here
        }
        // Whatever could refuse the whiteout is asked before the rename is made: once the
        // rename's record is in the journal, the whiteout's must follow.
        self.room_for(4096)?;
        let ns = self.dir_node(parent)?.ns;
        if self.namespaces.get(&ns).ok_or(errno::ESTALE)?.next_oid >= MAX_OID {
            return Err(errno::ENOSPC);
        }
        self.rename_part(true, parent, name, newparent, newname, flags & RENAME_NOREPLACE)?;
        if let Err(e) = self.make_node(parent, name, Kind::CharDev, 0, 0, uid, gid, 0, &[]) {
            // Memory has the rename, the journal a record that waits for one that never comes.
            self.fail(&format!("the whiteout of a rename could not be made ({e})"));
            return Err(e);
        }
        self.maybe_checkpoint()
    }
}
