//! Turning a directory into a cube (`cube create --convert`) and a cube back into a
//! directory (`cube remove`), all or nothing across a crash of the daemon or the command
//! (issue 34 items 1, 2 and 7). Both copy one tree into another beside it through the mount
//! (the command does that: cubes keep their blocks apart), then put the copy in the
//! original's place in one step (`RENAME_EXCHANGE` of two directories of the main volume:
//! one journal record) and remove the original. So the new form is seen at the path only
//! once it is whole, and the original is removed only once the copy is durable.
//!
//! Each is recorded in `STORE/intents` (`records::intents`) before its first step: at
//! stage `copy` while the command copies (a crash then undoes it: the partial copy goes,
//! the original stays), at stage `swap` once the copy is whole and synced (a crash then
//! finishes it). The next mount does either before it serves any cube (`finish_intents`),
//! and `scion check` names what is pending meanwhile.

use super::{fail, free_id, show, split_last, trim, Cubes};
use crate::Engine;
use scion_fs::records::cubes::{self, Mode, OnError};
use scion_fs::records::intents::{self, Intent, Stage};
use scion_fs::{errno, Fs, FsResult};
use std::path::Path;

/// The hidden sibling names a command may use: `.NAME.scion-WHAT-PID` beside NAME.
fn sibling(path: &[u8], hidden: &[u8]) -> FsResult<()> {
    let (p1, _) = split_last(path);
    let (p2, n2) = split_last(hidden);
    if p1 != p2 || !n2.starts_with(b".") || !n2.windows(7).any(|w| w == b".scion-") {
        return Err(errno::EINVAL.with(format!("/{} is not a hidden sibling of /{}", show(hidden), show(path))));
    }
    Ok(())
}

impl Cubes {
    /// The first step of `cube create --convert TARGET`: cube made at `hidden` (a hidden
    /// sibling), recorded as a convert at stage `copy` first. The command then copies
    /// TARGET into it and calls `convert_end`.
    pub fn convert_begin(&self, hidden: &[u8], target: &[u8], mode: Mode, on_error: OnError, pid: u32) -> FsResult<cubes::Cube> {
        self.changeable()?;
        let (hidden, target) = (trim(hidden), trim(target));
        sibling(target, hidden)?;
        if let Some(c) = self.below(b"").into_iter().find(|c| cubes::nested(c, target) || cubes::nested(target, c)) {
            return Err(errno::EBUSY.with(format!("/{} is, holds or lies in cube /{}: it is not converted", show(target), show(&c))));
        }
        self.settle(target, pid)?;
        let id = free_id(&self.state.lock().unwrap().0);
        let intent = Intent::Convert { pid, stage: Stage::Copy, cube: id, target: target.to_vec(), hidden: hidden.to_vec() };
        intents::add(&self.host, &self.store, intent.clone()).map_err(fail)?;
        match self.create_as(hidden, mode, on_error, Some(id)) {
            Ok(c) => Ok(c),
            Err(e) => {
                // Nothing was made that the table names; what creation left goes with it.
                let _ = undo_convert(&self.host, &self.store, &self.router.main(), id, hidden);
                let _ = intents::update(&self.host, &self.store, &intent, None);
                self.serve_table_again()?;
                Err(e)
            }
        }
    }

    /// The last steps of a convert: the cube at `hidden` made durable, exchanged with
    /// TARGET, and the original (then at `hidden`) removed.
    pub fn convert_end(&self, hidden: &[u8], pid: u32) -> FsResult<cubes::Cube> {
        self.changeable()?;
        let hidden = trim(hidden);
        let intent = self.intent_for(|i| matches!(i, Intent::Convert { hidden: h, stage: Stage::Copy, .. } if h == hidden))?;
        let Intent::Convert { cube: id, target, .. } = intent.clone() else { unreachable!() };
        let vol = self
            .route_path(hidden)?
            .ok_or_else(|| errno::ENOENT.with(format!("/{} is no cube being made", show(hidden))))?;
        // Durable before the original can go (a `nojournal` cube's fsync is a checkpoint).
        vol.1.fsync()?;
        let swap = Intent::Convert { pid, stage: Stage::Swap, cube: id, target: target.clone(), hidden: hidden.to_vec() };
        intents::update(&self.host, &self.store, &intent, Some(swap.clone())).map_err(fail)?;
        scion_fs::failpoint::pause("cube.swap");
        let main = self.router.main();
        exchange(&main, hidden, &target)?;
        self.moved(id, &target)?;
        let removed = remove_if_there(&main, hidden);
        self.forget_entry(hidden);
        self.forget_entry(&target);
        removed?;
        intents::update(&self.host, &self.store, &swap, None).map_err(fail)?;
        let st = self.state.lock().unwrap();
        st.0.cubes.iter().find(|c| c.id == id).cloned().ok_or_else(|| errno::EIO.with("the converted cube left the table"))
    }

    /// The first step of `cube remove DIR`: recorded as a removal at stage `copy` with the
    /// hidden directory `tmp` the command will copy the cube into, then makes. The command
    /// copies and calls `uncube_end`.
    pub fn uncube_begin(&self, dir: &[u8], tmp: &[u8], pid: u32) -> FsResult<cubes::Cube> {
        self.changeable()?;
        let (dir, tmp) = (trim(dir), trim(tmp));
        sibling(dir, tmp)?;
        self.settle(dir, pid)?;
        let cube = {
            let st = self.state.lock().unwrap();
            st.0.cubes.iter().find(|c| c.path == dir).cloned().ok_or_else(|| super::not_a_cube(dir))?
        };
        let intent = Intent::Uncube { pid, stage: Stage::Copy, cube: cube.id, dir: dir.to_vec(), tmp: tmp.to_vec() };
        intents::add(&self.host, &self.store, intent).map_err(fail)?;
        Ok(cube)
    }

    /// The last steps of a removal: the copy at `tmp` made durable, the cube stopped, the
    /// copy exchanged with the cube's directory, the cube's store deleted.
    pub fn uncube_end(&self, dir: &[u8], pid: u32) -> FsResult<cubes::Cube> {
        self.changeable()?;
        let dir = trim(dir);
        let intent = self.intent_for(|i| matches!(i, Intent::Uncube { dir: d, stage: Stage::Copy, .. } if d == dir))?;
        let Intent::Uncube { cube: id, tmp, .. } = intent.clone() else { unreachable!() };
        let main = self.router.main();
        // The copy durable before the cube goes.
        main.fsync()?;
        let swap = Intent::Uncube { pid, stage: Stage::Swap, cube: id, dir: dir.to_vec(), tmp: tmp.clone() };
        intents::update(&self.host, &self.store, &intent, Some(swap.clone())).map_err(fail)?;
        scion_fs::failpoint::pause("cube.swap");
        let cube = self.stop(dir)?;
        let r = finish_uncube(&self.host, &self.store, &main, id, dir, &tmp);
        self.serve_table_again()?;
        r?;
        self.forget_entry(dir);
        self.forget_entry(&tmp);
        intents::update(&self.host, &self.store, &swap, None).map_err(fail)?;
        log::info!("cube /{} removed; its tree is an ordinary directory there", show(dir));
        Ok(cube)
    }

    /// Undoes a convert whose copy failed: the cube at `hidden` ended, its store deleted.
    pub fn convert_abandon(&self, hidden: &[u8]) -> FsResult<()> {
        let hidden = trim(hidden);
        let intent = self.intent_for(|i| matches!(i, Intent::Convert { hidden: h, stage: Stage::Copy, .. } if h == hidden))?;
        let Intent::Convert { cube: id, .. } = &intent else { unreachable!() };
        if self.below(b"").iter().any(|c| c == hidden) {
            self.stop(hidden)?;
        }
        undo_convert(&self.host, &self.store, &self.router.main(), *id, hidden)?;
        self.forget_entry(hidden);
        self.serve_table_again()?;
        intents::update(&self.host, &self.store, &intent, None).map_err(fail)
    }

    /// Undoes a removal whose copy failed: the partial copy goes, the cube stays.
    pub fn uncube_abandon(&self, dir: &[u8]) -> FsResult<()> {
        let dir = trim(dir);
        let intent = self.intent_for(|i| matches!(i, Intent::Uncube { dir: d, stage: Stage::Copy, .. } if d == dir))?;
        let Intent::Uncube { tmp, .. } = &intent else { unreachable!() };
        remove_if_there(&self.router.main(), tmp)?;
        self.forget_entry(tmp);
        intents::update(&self.host, &self.store, &intent, None).map_err(fail)
    }

    /// The pending intent `pick` finds, refused if none.
    fn intent_for(&self, pick: impl Fn(&Intent) -> bool) -> FsResult<Intent> {
        let all = intents::load(&self.host, &self.store).map_err(fail)?.intents;
        all.into_iter().find(|i| pick(i)).ok_or_else(|| errno::ENOENT.with("no such command under way (it was finished or undone meanwhile)"))
    }

    /// Before a command on `path`: one still running there refuses it (EBUSY); one whose
    /// process is gone (killed) is finished or undone first, as a mount would.
    fn settle(&self, path: &[u8], pid: u32) -> FsResult<()> {
        let all = intents::load(&self.host, &self.store).map_err(fail)?.intents;
        for i in all {
            let on = match &i {
                Intent::Convert { target, .. } => target.as_slice(),
                Intent::Uncube { dir, .. } => dir.as_slice(),
                Intent::Replace { .. } | Intent::Refill { .. } => continue,
            };
            if on != path {
                continue;
            }
            if i.pid() != pid && intents::alive(i.pid()) {
                return Err(errno::EBUSY.with(format!("{} (process {} runs it)", i.describe(), i.pid())));
            }
            log::info!("{}: its process is gone; settled now", i.describe());
            // Served cubes are stopped for the settling, then served as the table has them.
            if let Intent::Uncube { dir, .. } | Intent::Convert { hidden: dir, .. } = &i {
                if self.below(b"").iter().any(|c| c == dir) {
                    self.stop(dir)?;
                }
            }
            settle(&self.host, &self.store, &self.router.main(), &i)?;
            self.serve_table_again()?;
        }
        Ok(())
    }

    /// Cube `id` now hangs at `path` (its directory renamed there): the table and what is
    /// served follow.
    fn moved(&self, id: u32, path: &[u8]) -> FsResult<()> {
        let mut st = self.state.lock().unwrap();
        let mut list = st.0.cubes.clone();
        let c = list.iter_mut().find(|c| c.id == id).ok_or_else(|| errno::EIO.with("the cube left the table"))?;
        c.path = path.to_vec();
        st.0 = cubes::save(&self.host, &self.store, &st.0, list).map_err(fail)?;
        if let Some(s) = st.1.iter_mut().find(|s| s.cube.id == id) {
            s.cube.path = path.to_vec();
        }
        Ok(())
    }

    /// Stops serving the cube at `dir` (its worker, its volume; the engine closed) without
    /// touching its table entry or store.
    pub(super) fn stop(&self, dir: &[u8]) -> FsResult<cubes::Cube> {
        let mut st = self.state.lock().unwrap();
        let i = st.1.iter().position(|s| s.cube.path == dir).ok_or_else(|| super::not_a_cube(dir))?;
        let old = st.1.remove(i);
        drop(st);
        if let Some(b) = old.background {
            b.stop();
        }
        if let Some(d) = old.dead {
            self.router.release(d);
        }
        if let Some(e) = old.vol.and_then(|vol| self.router.remove(vol)) {
            super::retire(dir, e);
        }
        Ok(old.cube)
    }

    /// Takes the table as the disk has it (the steps above write it themselves) and serves
    /// the cubes of it that are not served.
    fn serve_table_again(&self) -> FsResult<()> {
        let table = cubes::load(&self.host, &self.store).map_err(fail)?;
        let mut st = self.state.lock().unwrap();
        st.1.retain(|s| table.cubes.iter().any(|c| c.id == s.cube.id));
        let missing: Vec<cubes::Cube> = table.cubes.iter().filter(|c| !st.1.iter().any(|s| s.cube.id == c.id)).cloned().collect();
        st.0 = table;
        drop(st);
        for c in missing {
            let served = self.serve(c);
            self.state.lock().unwrap().1.push(served);
        }
        Ok(())
    }
}

/// Finishes or undoes every command the intents of the store at `store` name (at mount,
/// before any cube is served; the main volume open and replayed).
pub(super) fn finish_intents(host: &scion_store::Host, store: &Path, main: &Engine) -> FsResult<()> {
    for i in intents::load(host, store).map_err(fail)?.intents {
        if matches!(i, Intent::Replace { .. } | Intent::Refill { .. }) {
            continue; // the volume's own open does these
        }
        log::info!("{}: settled at mount", i.describe());
        settle(host, store, main, &i)?;
    }
    Ok(())
}

/// Finishes (stage `swap`) or undoes (stage `copy`) intent `i`, whose cube is not served;
/// then removes it. Each step finds what is already done and goes on from there, so a crash
/// while settling is settled again.
fn settle(host: &scion_store::Host, store: &Path, main: &Engine, i: &Intent) -> FsResult<()> {
    match i {
        Intent::Convert { stage: Stage::Copy, cube, hidden, .. } => undo_convert(host, store, main, *cube, hidden)?,
        Intent::Convert { stage: Stage::Swap, cube, target, hidden, .. } => {
            let table = cubes::load(host, store).map_err(fail)?;
            if let Some(c) = table.cubes.iter().find(|c| c.id == *cube) {
                // Exchanged already if the cube's directory is at TARGET.
                if resolve(main, target).ok() != Some(c.graft) {
                    exchange(main, hidden, target)?;
                }
                if c.path != *target {
                    let mut list = table.cubes.clone();
                    list.iter_mut().filter(|x| x.id == *cube).for_each(|x| x.path = target.clone());
                    cubes::save(host, store, &table, list).map_err(fail)?;
                }
                remove_if_there(main, hidden)?;
            }
        }
        Intent::Uncube { stage: Stage::Copy, tmp, .. } => remove_if_there(main, tmp)?,
        Intent::Uncube { stage: Stage::Swap, cube, dir, tmp, .. } => finish_uncube(host, store, main, *cube, dir, tmp)?,
        Intent::Replace { .. } | Intent::Refill { .. } => return Ok(()),
    }
    intents::update(host, store, i, None).map_err(fail)
}

/// Undoes a convert cut short while copying: cube `id` (at `hidden`) leaves the table, its
/// store goes, and its directory in the main volume (empty there) is removed.
fn undo_convert(host: &scion_store::Host, store: &Path, main: &Engine, id: u32, hidden: &[u8]) -> FsResult<()> {
    let table = cubes::load(host, store).map_err(fail)?;
    if table.cubes.iter().any(|c| c.id == id) {
        let list = table.cubes.iter().filter(|c| c.id != id).cloned().collect();
        cubes::save(host, store, &table, list).map_err(fail)?;
    }
    let dir = store.join(cubes::DIR).join(id.to_string());
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    }
    remove_if_there(main, hidden)
}

/// The last steps of a removal, each skipped if done: the copy at `tmp` exchanged with the
/// cube's directory `dir`, the cube out of the table, its store deleted, its old (empty)
/// directory, now at `tmp`, removed.
fn finish_uncube(host: &scion_store::Host, store: &Path, main: &Engine, id: u32, dir: &[u8], tmp: &[u8]) -> FsResult<()> {
    let table = cubes::load(host, store).map_err(fail)?;
    if let Some(c) = table.cubes.iter().find(|c| c.id == id) {
        if resolve(main, dir).ok() == Some(c.graft) {
            exchange(main, tmp, dir)?;
        }
        let list = table.cubes.iter().filter(|c| c.id != id).cloned().collect();
        cubes::save(host, store, &table, list).map_err(fail)?;
    }
    let sdir = store.join(cubes::DIR).join(id.to_string());
    if sdir.exists() {
        std::fs::remove_dir_all(&sdir).map_err(|e| fail(format!("{}: {e}", sdir.display())))?;
    }
    remove_if_there(main, tmp)
}

/// The main volume's inode at `path`.
fn resolve(main: &Engine, path: &[u8]) -> FsResult<scion_fs::Ino> {
    main.lock().resolve_path(path)
}

/// Exchanges siblings `a` and `b` of the main volume in one step, durably.
fn exchange(main: &Engine, a: &[u8], b: &[u8]) -> FsResult<()> {
    {
        let mut fs = main.lock();
        let (pa, na) = fs.resolve_parent(a)?;
        let (pb, nb) = fs.resolve_parent(b)?;
        fs.rename(pa, &na, pb, &nb, scion_fs::RENAME_EXCHANGE)?;
        fs.fsync()?;
    }
    Ok(())
}

/// Removes the tree at `path` of the main volume if there is one, durably.
fn remove_if_there(main: &Engine, path: &[u8]) -> FsResult<()> {
    let mut fs = main.lock();
    let Ok((parent, name)) = fs.resolve_parent(path) else { return Ok(()) };
    if fs_child(&mut fs, parent, &name)? {
        fs.remove_all(parent, &name)?;
        fs.fsync()?;
    }
    Ok(())
}

fn fs_child(fs: &mut Fs, parent: scion_fs::Ino, name: &[u8]) -> FsResult<bool> {
    match fs.lookup(parent, name) {
        Ok(a) => {
            fs.forget(a.ino, 1);
            Ok(true)
        }
        Err(e) if e == libc::ENOENT => Ok(false),
        Err(e) => Err(e),
    }
}
