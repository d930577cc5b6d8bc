//! Cubes (issue 21, after IceFS): directories that are stores of their own. A cube's blocks,
//! journal, reference counts, superblock and checkpoints live in `STORE/cubes.d/ID`, a store
//! like any other; the mount serves it as one more volume (`router.rs`: its own engine and
//! lock, its own background worker and checkpoints), shown at its directory as a mounted
//! filesystem is shown at its mount point (a graft). So an fsync in one cube syncs that
//! cube's journal only, requests to different cubes never wait on one lock, and a failure
//! inside a cube fails that volume alone: by its policy it turns read-only (EROFS) or fenced
//! (EIO for everything), and the rest of the mount goes on.
//!
//! The cube table (`records::cubes`, two checksummed copies) names each cube's directory and
//! id. Order of a creation, so a crash leaves nothing half made that is visible: the
//! directory in the main volume (journaled and synced), the cube's store, then the table;
//! an empty directory or a store directory no table names is what a crash can leave, and a
//! later creation reuses the id's directory.

use crate::router::{Router, Serving, VolumeId, VOLUME_NS_LIMIT};
use crate::{Background, Engine};
use scion_fs::records::cubes::{self, Cube, Mode, OnError, Stored};
use scion_fs::{errno, Fs, FsError, FsResult, Ino, Inval, Kind, MountOptions, SetAttr, MAIN_NS_LIMIT, ROOT_INO};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[path = "cube_moves.rs"]
mod moves;

/// Starts a served cube's background worker (checkpoints, write-behind, punching, its own
/// schedules); the invalidations it asks for are in the kernel's inode numbers already.
pub type StartBackground = Box<dyn Fn(Engine, Box<dyn Fn(&[Inval]) + Send>) -> Background + Send + Sync>;
/// Tells the kernel what to forget, in its own inode numbers.
pub type GlobalInvalidator = Arc<dyn Fn(&[Inval]) + Send + Sync>;

/// A cube as `scion cube list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CubeRow {
    pub id: u32,
    pub path: Vec<u8>,
    pub mode: String,
    pub on_error: String,
    /// `ok`, `read-only`, `fenced`, or `unavailable` (its store could not be opened).
    pub state: String,
    /// Why it is not `ok`.
    pub why: String,
    /// Bytes its store takes on the host.
    pub used: u64,
}

struct ServedCube {
    cube: Cube,
    /// `None`: its store could not be opened (`why`).
    vol: Option<VolumeId>,
    /// Then, the slot its directory is grafted to, so that it gives EIO, not an empty
    /// directory.
    dead: Option<VolumeId>,
    why: String,
    background: Option<Background>,
}

/// The cubes of one mount.
pub struct Cubes {
    store: PathBuf,
    router: Arc<Router>,
    start_background: StartBackground,
    invalidate: GlobalInvalidator,
    state: Mutex<(Stored, Vec<ServedCube>)>,
    /// The mount is read-only: so is every cube (`Fs::read_only`).
    read_only: bool,
    /// The filesystem the store lives on, the main volume's (a test's faulty one too).
    host: scion_store::Host,
}

/// The id `scion list` shows for clone or snapshot `ns` of cube `cube`, and `scion destroy @ID`
/// takes: past every id of the main volume (below `MAIN_NS_LIMIT`), then the cube's id and
/// its own namespace id (below `VOLUME_NS_LIMIT`), so one id names one thing in the mount.
pub fn global_id(cube: u32, ns: u32) -> u32 {
    assert!(cube <= cubes::MAX_CUBES && ns < VOLUME_NS_LIMIT, "cube {cube} namespace {ns}");
    MAIN_NS_LIMIT + cube * VOLUME_NS_LIMIT + ns
}

/// The cube and namespace a `global_id` names, if it names one in a cube.
pub fn split_global_id(id: u32) -> Option<(u32, u32)> {
    let x = id.checked_sub(MAIN_NS_LIMIT)?;
    Some((x / VOLUME_NS_LIMIT, x % VOLUME_NS_LIMIT))
}

fn fail(e: impl std::fmt::Display) -> FsError {
    errno::EIO.with(e.to_string())
}

impl Cubes {
    /// Serves every cube of the table of `store` (one that cannot be opened is listed as
    /// unavailable, and its directory stays empty).
    pub fn open(store: &Path, router: Arc<Router>, start_background: StartBackground, invalidate: GlobalInvalidator) -> FsResult<Cubes> {
        let (read_only, host) = {
            let main = router.main();
            let fs = main.lock();
            (fs.read_only, fs.host())
        };
        // Converts and removals a crash cut short: finished or undone before anything is
        // served (`moves.rs`).
        if !read_only {
            moves::finish_intents(&host, store, &router.main())?;
        }
        let table = cubes::load(&host, store).map_err(fail)?;
        let cubes = Cubes {
            read_only,
            host,
            store: store.to_path_buf(),
            router,
            start_background,
            invalidate,
            state: Mutex::new((table.clone(), Vec::new())),
        };
        for c in table.cubes {
            let served = cubes.serve(c);
            cubes.state.lock().unwrap().1.push(served);
        }
        Ok(cubes)
    }

    /// Opens a cube's store and serves it at its directory.
    fn serve(&self, cube: Cube) -> ServedCube {
        match self.serve_volume(&cube) {
            Ok((vol, background, note)) => ServedCube { cube, vol: Some(vol), dead: None, why: note, background: Some(background) },
            Err(e) => {
                log::error!("cube /{}: not served: {e}", show(&cube.path));
                let main = self.router.main();
                let chain = resolve_chain(&mut main.lock(), &cube.path);
                let dead = self.router.add_unavailable().ok();
                if let Some(dead) = dead {
                    match chain {
                        Ok(chain) => {
                            let (dir, above) = chain.split_last().expect("a cube's path is not empty");
                            self.router.graft(VolumeId::MAIN, *dir, above.to_vec(), dead);
                        }
                        Err(_) if cube.graft != 0 => self.router.graft(VolumeId::MAIN, cube.graft, Vec::new(), dead),
                        Err(_) => {}
                    }
                    self.router.name_cube(cube.id, dead);
                }
                ServedCube { cube, vol: None, dead, why: e.to_string(), background: None }
            }
        }
    }

    /// The cube's volume, its worker, and a note if its path cannot be walked.
    fn serve_volume(&self, cube: &Cube) -> FsResult<(VolumeId, Background, String)> {
        let main = self.router.main();
        // The cube hangs at its directory, found by path; if a directory above it cannot be
        // read, by the inode number the table recorded (it is reached at .cubes/ID then).
        let (dir, above, note) = match resolve_chain(&mut main.lock(), &cube.path) {
            Ok(chain) => {
                let (dir, above) = chain.split_last().expect("a cube's path is not empty");
                (*dir, above.to_vec(), String::new())
            }
            Err(e) if cube.graft != 0 => {
                let note = format!("its path cannot be walked ({e}); reach it at .cubes/{}", cube.id);
                log::error!("cube /{}: {note}", show(&cube.path));
                (cube.graft, Vec::new(), note)
            }
            Err(e) => return Err(e),
        };
        let engine = self.open_engine(cube)?;
        let vol = self.router.add_serving(engine.clone(), serving(cube), generation(cube))?;
        self.router.graft(VolumeId::MAIN, dir, above, vol);
        self.router.name_cube(cube.id, vol);
        log::info!("cube /{} served ({}, on error {})", show(&cube.path), cube.mode.name(), cube.on_error.name());
        Ok((vol, self.start(vol, engine), note))
    }

    /// The cube's store, opened as its volume's engine.
    fn open_engine(&self, cube: &Cube) -> FsResult<Engine> {
        let opts = MountOptions { holder: format!("cube /{}", show(&cube.path)), host: self.host.clone() };
        let mut fs = Fs::open(&cube.store_dir(&self.store), opts).map_err(fail)?;
        fs.set_punch_later(true);
        fs.read_only = self.read_only;
        configure(&mut fs, cube)?;
        if !self.read_only {
            // What scans killed part way left (no scan runs before the cube is served).
            if let Err(e) = crate::control::destroy_scan_pins(&mut fs) {
                log::warn!("cube /{}: snapshots that killed scans left not destroyed: {e}", show(&cube.path));
            }
        }
        Ok(Engine::new(fs))
    }

    /// Starts the background worker of volume `vol`, its invalidations made the kernel's.
    fn start(&self, vol: VolumeId, engine: Engine) -> Background {
        let inval = self.invalidate.clone();
        (self.start_background)(
            engine,
            Box::new(move |i: &[Inval]| inval(&vol.global_invals(i))),
        )
    }

    /// Makes the new directory `path` (its parent in the store's main tree, not in a clone
    /// or snapshot) a cube, owned as its parent is.
    pub fn create(&self, path: &[u8], mode: Mode, on_error: OnError) -> FsResult<Cube> {
        self.create_as(path, mode, on_error, None)
    }

    /// `create`, as cube `id` if given (a convert records the id before it creates).
    fn create_as(&self, path: &[u8], mode: Mode, on_error: OnError, id: Option<u32>) -> FsResult<Cube> {
        self.changeable()?;
        let path = trim(path);
        let mut st = self.state.lock().unwrap();
        if path.is_empty() || path.split(|b| *b == b'/').any(|n| n == b".." || n == b"." || n == b".snapshot") {
            return Err(errno::EINVAL.with("a cube is a new directory below the mount root, named without . or .. or .snapshot"));
        }
        if let Some(o) = st.0.cubes.iter().find(|o| cubes::nested(&o.path, path) || cubes::nested(path, &o.path)) {
            return Err(errno::EBUSY.with(format!("/{} is a cube; cubes do not nest", show(&o.path))));
        }
        if st.0.cubes.len() >= cubes::MAX_CUBES as usize {
            return Err(errno::ENOSPC.with(format!("a store holds at most {} cubes", cubes::MAX_CUBES)));
        }
        let id = match id {
            Some(i) if st.0.cubes.iter().any(|c| c.id == i) => return Err(errno::EBUSY.with(format!("cube id {i} was taken meanwhile"))),
            Some(i) => i,
            None => free_id(&st.0),
        };
        let mut cube = Cube { id, mode, on_error, graft: 0, path: path.to_vec() };
        let (parent_path, name) = split_last(path);
        let main = self.router.main();
        let (uid, gid);
        {
            let mut fs = main.lock();
            let parent = fs.resolve_path(parent_path)?;
            let pa = fs.getattr(parent)?;
            (uid, gid) = (pa.uid, pa.gid);
            if parent >> 40 != 0 || parent & scion_fs::clone::SNAPDIR_BIT != 0 {
                return Err(errno::EXDEV.with("a cube is made in the store's main tree, not in a clone or snapshot"));
            }
            let a = fs.mknod(parent, name, Kind::Dir, 0o755, 0, uid, gid, 0, b"")?;
            fs.forget(a.ino, 1);
            cube.graft = a.ino;
        }
        let host = self.host.clone();
        let made = main.fsync().and_then(|()| {
            let dir = cube.store_dir(&self.store);
            let _ = std::fs::remove_dir_all(&dir); // what a crashed creation left
            std::fs::create_dir_all(&dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
            Fs::create(&host, &dir).map_err(fail)?;
            let mut fs = Fs::open(&dir, MountOptions { holder: "cube creation".into(), host: host.clone() }).map_err(fail)?;
            fs.setattr(ROOT_INO, SetAttr { uid: Some(uid), gid: Some(gid), ..Default::default() })?;
            fs.close().map_err(fail)?;
            let mut list = st.0.cubes.clone();
            list.push(cube.clone());
            cubes::save(&host, &self.store, &st.0, list).map_err(fail)
        });
        st.0 = match made {
            Ok(table) => table,
            Err(e) => {
                // Not a cube: the directory made for it goes again.
                let mut fs = main.lock();
                if let Ok(parent) = fs.resolve_path(parent_path) {
                    let _ = fs.rmdir(parent, name);
                }
                drop(fs);
                self.forget_entry(path);
                return Err(e);
            }
        };
        let served = self.serve(cube.clone());
        if served.vol.is_none() {
            let why = served.why.clone();
            st.1.push(served);
            return Err(fail(format!("cube made, but not served: {why}")));
        }
        st.1.push(served);
        drop(st);
        self.forget_entry(path);
        Ok(cube)
    }

    /// Changes a cube's mode or failure policy, from the next request on.
    pub fn set(&self, path: &[u8], mode: Option<Mode>, on_error: Option<OnError>) -> FsResult<Cube> {
        self.changeable()?;
        let path = trim(path);
        let mut st = self.state.lock().unwrap();
        let mut list = st.0.cubes.clone();
        let c = list.iter_mut().find(|c| c.path == path).ok_or_else(|| not_a_cube(path))?;
        c.mode = mode.unwrap_or(c.mode);
        c.on_error = on_error.unwrap_or(c.on_error);
        let cube = c.clone();
        st.0 = cubes::save(&self.host, &self.store, &st.0, list).map_err(fail)?;
        if let Some(s) = st.1.iter_mut().find(|s| s.cube.path == path) {
            s.cube = cube.clone();
            if let Some(vol) = s.vol {
                self.router.set_serving(vol, serving(&cube));
                if let Some(e) = self.router.any_engine(vol) {
                    configure(&mut e.lock(), &cube)?;
                }
            }
        }
        Ok(cube)
    }

    /// Serves a cube again from its store as the disk holds it (after `scion check --cube
    /// --repair`, or a failure that has passed): its engine is closed (no checkpoint if it
    /// failed), opened again (the journal replayed) and put in the old one's place. Files
    /// the cube had open get ESTALE; paths walked again find it.
    pub fn recover(&self, path: &[u8]) -> FsResult<Cube> {
        let path = trim(path);
        let mut st = self.state.lock().unwrap();
        let i = st.1.iter().position(|s| s.cube.path == path).ok_or_else(|| not_a_cube(path))?;
        let cube = st.1[i].cube.clone();
        let old = std::mem::replace(&mut st.1[i], ServedCube { cube, vol: None, dead: None, why: "recovering".into(), background: None });
        if let Some(d) = old.dead {
            self.router.release(d);
        }
        if let Some(b) = old.background {
            b.stop();
        }
        if let Some(e) = old.vol.and_then(|vol| self.router.remove(vol)) {
            retire(path, e);
        }
        let served = self.serve(old.cube.clone());
        let why = served.why.clone();
        let ok = served.vol.is_some();
        st.1[i] = served;
        drop(st);
        self.forget_entry(path);
        if ok {
            Ok(old.cube)
        } else {
            Err(fail(format!("/{} could not be served again: {why}", show(path))))
        }
    }

    /// Ends a cube: its worker stopped, its engine closed, its entry gone from the table, its
    /// store deleted and its (empty) directory in the main volume removed. What it held is
    /// gone with it: `scion cube remove` copies it out first. Returns the cube as it was.
    pub fn remove(&self, path: &[u8]) -> FsResult<Cube> {
        self.changeable()?;
        let path = trim(path);
        {
            let mut st = self.state.lock().unwrap();
            if !st.1.iter().any(|s| s.cube.path == path) {
                return Err(not_a_cube(path));
            }
            let mut list = st.0.cubes.clone();
            list.retain(|c| c.path != path);
            st.0 = cubes::save(&self.host, &self.store, &st.0, list).map_err(fail)?;
        }
        let cube = self.stop(path)?;
        let dir = cube.store_dir(&self.store);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            log::warn!("cube /{}: its store {} stays: {e}", show(path), dir.display());
        }
        let (parent_path, name) = split_last(path);
        let main = self.router.main();
        let r = (|| {
            let mut fs = main.lock();
            let parent = fs.resolve_path(parent_path)?;
            fs.rmdir(parent, name)
        })();
        if let Err(e) = r {
            log::warn!("cube /{}: its directory stays: {e}", show(path));
        }
        self.forget_entry(path);
        log::info!("cube /{} removed", show(path));
        Ok(cube)
    }

    /// Checks a served cube's store while the rest of the mount goes on: the cube is taken
    /// out (its requests get EIO, `scion cube list` says `checking`), closed (its final
    /// checkpoint), checked as an unmounted store, and served again from what is on disk.
    /// Files it had open get ESTALE afterwards.
    pub fn check(&self, path: &[u8]) -> FsResult<scion_fs::check::Report> {
        let path = trim(path);
        let (vol, cube, background) = {
            let mut st = self.state.lock().unwrap();
            let s = st.1.iter_mut().find(|s| s.cube.path == path).ok_or_else(|| not_a_cube(path))?;
            let vol = s.vol.ok_or_else(|| errno::EIO.with(format!("/{} is unavailable: {}", show(path), s.why)))?;
            if self.router.is_taken_out(vol) {
                return Err(errno::EBUSY.with(format!("/{} is being checked", show(path))));
            }
            (vol, s.cube.clone(), s.background.take())
        };
        if let Some(b) = background {
            b.stop();
        }
        // The same store served again: the same inode numbers, the same generation.
        let generation = self.router.generation(vol);
        retire(path, self.router.take_out(vol).expect("a served cube's volume is in the router"));
        let report = scion_fs::check::check(&self.host, &cube.store_dir(&self.store)).map_err(fail);
        let back = self.open_engine(&cube).and_then(|engine| {
            self.router.put_back(vol, engine.clone(), serving(&cube), generation)?;
            Ok(self.start(vol, engine))
        });
        let mut st = self.state.lock().unwrap();
        if let Some(s) = st.1.iter_mut().find(|s| s.cube.path == path) {
            match back {
                Ok(b) => s.background = Some(b),
                Err(e) => {
                    s.vol = None;
                    s.why = format!("not served again after its check: {e}");
                }
            }
        }
        drop(st);
        self.forget_entry(path);
        report
    }

    /// The kernel forgets the directory's entry, so the next walk looks it up again (and
    /// finds the cube's root).
    fn forget_entry(&self, path: &[u8]) {
        let (parent_path, name) = split_last(path);
        let parent = self.router.main().lock().resolve_path(parent_path);
        if let Ok(parent) = parent {
            (self.invalidate)(&[Inval::Entry(parent, name.to_vec()), Inval::Inode(parent)]);
        }
    }

    /// Every cube, with its state and space.
    pub fn list(&self) -> Vec<CubeRow> {
        let st = self.state.lock().unwrap();
        st.1
            .iter()
            .map(|s| {
                let failure = s.vol.and_then(|v| self.router.any_engine(v)).and_then(|e| e.lock().failure().map(str::to_string));
                let (state, why) = match (&s.vol, failure) {
                    (Some(v), _) if self.router.is_taken_out(*v) => ("checking", String::new()),
                    (None, _) => ("unavailable", s.why.clone()),
                    (Some(_), None) => ("ok", s.why.clone()),
                    (Some(_), Some(w)) if s.cube.on_error == OnError::Fence => ("fenced", w),
                    (Some(_), Some(w)) => ("read-only", w),
                };
                CubeRow {
                    id: s.cube.id,
                    path: s.cube.path.clone(),
                    mode: s.cube.mode.name().into(),
                    on_error: s.cube.on_error.name().into(),
                    state: state.into(),
                    why,
                    used: disk_usage(&s.cube.store_dir(&self.store)),
                }
            })
            .collect()
    }

    /// The cube `path` (a path from the mount root) lies in, if any: its volume, engine and
    /// the path inside it. A path that holds a cube without being in one is the main
    /// volume's; `holds` says whether it does.
    pub fn route_path(&self, path: &[u8]) -> FsResult<Option<(VolumeId, Engine, Vec<u8>)>> {
        let path = trim(path);
        let st = self.state.lock().unwrap();
        let Some(s) = st.1.iter().find(|s| cubes::nested(&s.cube.path, path)) else {
            return Ok(None);
        };
        let vol = s.vol.ok_or_else(|| errno::EIO.with(format!("cube /{} is unavailable: {}", show(&s.cube.path), s.why)))?;
        let rel = trim(&path[s.cube.path.len()..]).to_vec();
        Ok(Some((vol, self.router.engine(vol)?, rel)))
    }

    /// The path and id of the cube served as volume `vol`.
    pub fn path_of(&self, vol: VolumeId) -> Option<(Vec<u8>, u32)> {
        let st = self.state.lock().unwrap();
        st.1.iter().find(|s| s.vol == Some(vol)).map(|s| (s.cube.path.clone(), s.cube.id))
    }

    /// EROFS on a read-only mount, where the cube table does not change either.
    fn changeable(&self) -> FsResult<()> {
        match self.read_only {
            true => Err(scion_fs::read_only_refusal()),
            false => Ok(()),
        }
    }

    /// The path of cube `id`.
    pub fn path_of_id(&self, id: u32) -> Option<Vec<u8>> {
        let st = self.state.lock().unwrap();
        st.0.cubes.iter().find(|c| c.id == id).map(|c| c.path.clone())
    }

    /// The cubes at or below `path`.
    pub fn below(&self, path: &[u8]) -> Vec<Vec<u8>> {
        let path = trim(path);
        let st = self.state.lock().unwrap();
        st.0.cubes.iter().filter(|c| path.is_empty() || cubes::nested(path, &c.path)).map(|c| c.path.clone()).collect()
    }

    /// Stops every cube's worker and closes its engine (its final checkpoint).
    /// Every volume served, the main one last.
    pub fn volumes(&self) -> Vec<(VolumeId, Engine)> {
        let mut v = self.router.volumes();
        // (The router lists them by slot: the main volume's comes first.)
        let n = 1.min(v.len());
        v.rotate_left(n);
        v
    }

    pub fn close(&self) -> Result<(), String> {
        let mut st = self.state.lock().unwrap();
        let mut errors = Vec::new();
        for s in st.1.drain(..) {
            if let Some(b) = s.background {
                b.stop();
            }
            if let Some(e) = s.vol.and_then(|v| self.router.any_engine(v)) {
                if let Err(e) = e.close() {
                    errors.push(format!("cube /{}: {e}", show(&s.cube.path)));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// The lowest id no cube of `table` has.
fn free_id(table: &Stored) -> u32 {
    (1..=cubes::MAX_CUBES).find(|i| !table.cubes.iter().any(|c| c.id == *i)).expect("fewer than the most")
}

fn not_a_cube(path: &[u8]) -> FsError {
    errno::ENOENT.with(format!("/{} is not a cube", show(path)))
}

/// What a cube's table entry asks of its engine: the errno of changes once failed, whether
/// it journals, and whether file data goes into the journal.
/// A schedule of a directory above cubes snapshots each cube below it under the same name
/// (in the cube's own `.snapshot`, marked scheduled), as `scion snapshot` does by hand, and
/// its retention removes them with its own. A cube that cannot take one is logged and
/// skipped: the next snapshot tries again.
impl crate::scheduler::Companions for Cubes {
    fn taken(&self, dir: &[u8], name: &[u8], now: i64) {
        for c in self.below(dir) {
            let r = self.in_cube_root(&c, |fs, root| {
                let owner = fs.getattr(root)?.uid;
                let at = scion_fs::Ts { sec: now, nsec: 0 };
                let origin = format!("/{}", show(&c)).into_bytes();
                fs.snapshot_for(root, name, &origin, true, at, (owner != 0).then_some(owner))?;
                let snapdir = root | scion_fs::clone::SNAPDIR_BIT;
                Ok(vec![Inval::Entry(snapdir, name.to_vec()), Inval::Inode(snapdir)])
            });
            match r {
                Ok(()) => log::info!("schedule of /{}: took snapshot {} of cube /{}", show(dir), show(name), show(&c)),
                Err(e) => log::error!("schedule of /{}: snapshot {} of cube /{} failed: {e}", show(dir), show(name), show(&c)),
            }
        }
    }

    fn removed(&self, dir: &[u8], name: &[u8]) {
        for c in self.below(dir) {
            let r = self.in_cube_root(&c, |fs, root| {
                let found = fs.dir_snapshots(root)?.into_iter().find(|s| s.scheduled && s.name == name);
                if let Some(s) = found {
                    fs.destroy_id(s.id)?;
                }
                Ok(Vec::new())
            });
            if let Err(e) = r {
                log::error!("schedule of /{}: removing snapshot {} of cube /{} failed: {e}", show(dir), show(name), show(&c));
            }
        }
    }
}

impl Cubes {
    /// Runs `f` on the engine of cube `path` with its root directory, then hands the kernel
    /// what it and `f` made stale.
    fn in_cube_root(&self, path: &[u8], f: impl FnOnce(&mut Fs, Ino) -> FsResult<Vec<Inval>>) -> FsResult<()> {
        let Some((vol, engine, _)) = self.route_path(path)? else {
            return Err(errno::ENOENT.with(format!("/{} is not a cube", show(path))));
        };
        let mut inval = {
            let mut fs = engine.lock();
            let root = fs.root();
            let mut inval = f(&mut fs, root)?;
            inval.extend(fs.take_invalidations());
            inval
        };
        inval = vol.global_invals(&inval);
        (self.invalidate)(&inval);
        Ok(())
    }
}

fn configure(fs: &mut Fs, cube: &Cube) -> FsResult<()> {
    fs.failed_errno = match cube.on_error {
        OnError::ReadOnly => errno::EROFS,
        OnError::Fence => errno::EIO,
    };
    fs.set_journaled(cube.mode != Mode::NoJournal)?;
    fs.set_journal_data(cube.mode == Mode::Data);
    fs.set_writeback(cube.mode == Mode::Writeback);
    Ok(())
}

/// Closes a cube's engine taken out of the router (its final checkpoint, unless it failed)
/// and waits until requests that took it before finish, so its store's lock is free for the
/// next open.
fn retire(path: &[u8], engine: Engine) {
    if let Err(e) = engine.close() {
        log::warn!("cube /{}: closed without its final checkpoint: {e}", show(path));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !engine.is_last() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn serving(c: &Cube) -> Serving {
    Serving { nofsync: c.mode == Mode::NoFsync, fence: c.on_error == OnError::Fence }
}

fn trim(p: &[u8]) -> &[u8] {
    let mut p = p;
    while let [b'/', rest @ ..] = p {
        p = rest;
    }
    while let [rest @ .., b'/'] = p {
        p = rest;
    }
    p
}

/// A path's directory and last name.
fn split_last(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b""[..], path),
    }
}

fn show(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// The inodes of the directories on `path` from the root's child down to `path` itself.
fn resolve_chain(fs: &mut Fs, path: &[u8]) -> FsResult<Vec<Ino>> {
    let mut out = Vec::new();
    for (i, b) in path.iter().enumerate() {
        if *b == b'/' {
            out.push(fs.resolve_path(&path[..i])?);
        }
    }
    out.push(fs.resolve_path(path)?);
    Ok(out)
}

/// Bytes the files below `dir` take on the host.
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

/// The generation of a cube's entries (`Router::add_serving`): from its directory's inode
/// number (never reused) and its id, so the same at every mount (a file handle of one of its
/// files lasts across a remount) and another for each cube. 32 bits, as the kernel keeps it;
/// never 0, the main volume's.
fn generation(cube: &Cube) -> u64 {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&cube.graft.to_le_bytes());
    b[8..].copy_from_slice(&cube.id.to_le_bytes());
    let h = blake3::hash(&b);
    u64::from(u32::from_le_bytes(h.as_bytes()[..4].try_into().expect("4 bytes"))).max(1)
}
