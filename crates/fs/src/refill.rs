//! `restore DIR --from SNAP --replace` of a directory, in place: DIR stays the same object
//! (so its snapshots, which are anchored to its object id, stay in `DIR/.snapshot`; its inode
//! number stays, so a shell inside it sees the restored tree), and what is in it becomes the
//! snapshot's. Its schedules and mirror, kept by path, stay too.
//!
//! The steps, each recorded in `STORE/intents` (`Intent::Refill`) before it starts:
//! 1. `copy`: the snapshot's tree is copied to a hidden sibling TMP (a crash: TMP removed).
//! 2. `empty`: DIR's entries move into a hidden sibling OLD, one rename each.
//! 3. `fill`: TMP's entries move into DIR; DIR takes TMP's mode, owner, times and
//!    attributes; TMP and OLD are removed.
//!
//! A crash in step 2 or 3 is finished at the next open, so a user finds DIR either as it
//! was or whole as restored. Each step is durable (the journal synced) before the intents
//! say the next began: a replayed journal never holds less of a step than its record says.
//! Work is in proportion to DIR's entries and the snapshot's tree, under the engine lock.

use crate::error::errno;
use crate::inode::Kind;
use crate::fs::*;
use crate::records::intents::{self, Intent, Step};
use crate::restore::{beside, last_component, same_attrs, RestoreReport};
use crate::Inval;
use std::collections::HashMap;

impl Fs {
    /// Restores directory `parent/name` (at `dst`) in place from `from`, a directory.
    pub(crate) fn refill_dir(&mut self, from: Ino, parent: Ino, dst: &[u8], name: &[u8], stamp: &str) -> FsResult<RestoreReport> {
        let tmp = self.hidden_sibling(parent, name, &format!("restore-{stamp}"))?;
        let old = self.hidden_sibling(parent, name, &format!("restore-old-{stamp}"))?;
        let at = beside(dst);
        let intent = Intent::Refill { pid: std::process::id(), step: Step::Copy, dir: at(name), tmp: at(&tmp), old: at(&old) };
        self.record_intent(None, Some(&intent))?;
        let mut report = RestoreReport::default();
        let mut links = HashMap::new();
        let r = self.copy_tree(from, parent, &tmp, &mut links, &mut report, 0, None);
        for made in links.into_values() {
            self.forget(made, 1);
        }
        if let Err(e) = r {
            if self.child(parent, &tmp)?.is_some() {
                self.remove_tree(parent, &tmp, 0)?;
            }
            self.fsync()?;
            self.record_intent(Some(&intent), None)?;
            return Err(e);
        }
        let at_store = self.vol.dir.to_string_lossy().into_owned();
        crate::failpoint::hit_at("restore.copied", &at_store);
        let intent = self.next_step(intent, Step::Empty)?;
        self.refill_steps(parent, name, intent)?;
        Ok(report)
    }

    /// Finishes the refill `intent` of `parent/name` from its step (`Empty` or `Fill`): the
    /// rest of the moves, the attributes, the removal of its two hidden trees, and its end.
    fn refill_steps(&mut self, parent: Ino, name: &[u8], intent: Intent) -> FsResult<()> {
        let Intent::Refill { step, tmp, old, .. } = &intent else { unreachable!("a refill's intent") };
        assert!(*step != Step::Copy, "a refill's copy is undone, not finished");
        let (step, tmp, old) = (*step, last_component(tmp), last_component(old));
        let d = self.lookup(parent, name)?.ino;
        let r = self.refill_moves(parent, d, &tmp, &old, step, intent);
        self.forget(d, 1);
        r
    }

    fn refill_moves(&mut self, parent: Ino, d: Ino, tmp: &[u8], old: &[u8], step: Step, intent: Intent) -> FsResult<()> {
        let mut intent = intent;
        if step == Step::Empty {
            // (Held by the lookup reference mknod or lookup takes.)
            let o = match self.child(parent, old)? {
                Some(_) => self.lookup(parent, old)?.ino,
                None => self.mknod(parent, old, Kind::Dir, 0o700, 0, 0, 0, 0, &[])?.ino,
            };
            let r = self.move_entries(d, o);
            self.forget(o, 1);
            r?;
            intent = self.next_step(intent, Step::Fill)?;
            let at_store = self.vol.dir.to_string_lossy().into_owned();
            crate::failpoint::hit_at("restore.emptied", &at_store);
        }
        // Gone: a crash came after its entries and attributes were in place.
        if self.child(parent, tmp)?.is_some() {
            let t = self.lookup(parent, tmp)?.ino;
            let r = self.move_entries(t, d).and_then(|()| self.take_attributes(t, d));
            self.forget(t, 1);
            r?;
            self.remove_tree(parent, tmp, 0)?;
        }
        if self.child(parent, old)?.is_some() {
            self.remove_tree(parent, old, 0)?;
        }
        self.kernel_inval.push(Inval::Inode(d));
        self.fsync()?;
        self.record_intent(Some(&intent), None)
    }

    /// Moves every entry of directory `from` into directory `to` (which holds none of them).
    fn move_entries(&mut self, from: Ino, to: Ino) -> FsResult<()> {
        for e in self.readdir_real(from)? {
            self.rename(from, &e.name, to, &e.name, crate::RENAME_NOREPLACE)?;
            self.kernel_inval.push(Inval::Entry(from, e.name.clone()));
            self.kernel_inval.push(Inval::Entry(to, e.name));
        }
        Ok(())
    }

    /// Directory `to` takes `from`'s mode, owner, times and extended attributes.
    fn take_attributes(&mut self, from: Ino, to: Ino) -> FsResult<()> {
        for x in self.listxattr(to)? {
            self.removexattr(to, &x)?;
        }
        for x in self.listxattr(from)? {
            let v = self.getxattr(from, &x)?;
            self.setxattr(to, &x, &v, 0)?;
        }
        let a = self.getattr(from)?;
        self.setattr(to, same_attrs(&a)).map(|_| ())
    }

    /// Step `step` of a refill begins: what came before is made durable, then recorded.
    fn next_step(&mut self, intent: Intent, step: Step) -> FsResult<Intent> {
        let Intent::Refill { pid, dir, tmp, old, .. } = intent.clone() else { unreachable!("a refill's intent") };
        self.fsync()?;
        let next = Intent::Refill { pid, step, dir, tmp, old };
        self.record_intent(Some(&intent), Some(&next))?;
        Ok(next)
    }

    /// Adds (`old` None), replaces or removes (`new` None) an intent of this volume's store.
    fn record_intent(&mut self, old: Option<&Intent>, new: Option<&Intent>) -> FsResult<()> {
        let (host, store) = (self.vol.host.clone(), self.vol.dir.clone());
        let r = match (old, new) {
            (None, Some(n)) => intents::add(&host, &store, n.clone()),
            (Some(o), n) => intents::update(&host, &store, o, n.cloned()),
            (None, None) => Ok(()),
        };
        r.map_err(|e| errno::EIO.with(format!("restore --replace: {e}")))
    }

    /// Finishes or undoes a refill a crash cut short (at open, after the journal replay).
    pub(crate) fn settle_refill(&mut self, i: &Intent) -> FsResult<()> {
        let Intent::Refill { step, dir, tmp, old, .. } = i else { unreachable!("a refill's intent") };
        let (parent, name) = self.resolve_parent(dir)?;
        let (tmp, old) = (last_component(tmp), last_component(old));
        self.remember(parent)?;
        let r = if *step == Step::Copy {
            let r = (|| {
                for n in [&tmp, &old] {
                    if self.child(parent, n)?.is_some() {
                        self.remove_tree(parent, n, 0)?;
                    }
                }
                self.fsync()?;
                self.record_intent(Some(i), None)
            })();
            r
        } else {
            self.refill_steps(parent, &name, i.clone())
        };
        self.forget(parent, 1);
        log::info!("{}: {}", i.describe(), if r.is_ok() { "settled" } else { "not settled" });
        r
    }
}
