//! The NFS server through a real NFSv3 client (`nfs3_client`), at the protocol level: what
//! a file handle may and may not reach, who a call is, what a write's stability means.
//! The engine is driven directly to set each case up.

use nfs3_client::nfs3_types::nfs3::{
    createhow3, diropargs3, fattr3, filename3, nfs_fh3, nfspath3, nfsstat3, sattr3, stable_how, symlinkdata3,
    writeverf3, Nfs3Option, Nfs3Result, COMMIT3args, CREATE3args, GETATTR3args, LINK3args, LOOKUP3args, MKDIR3args,
    READ3args, READDIRPLUS3args, REMOVE3args, RENAME3args, RMDIR3args, SETATTR3args, SYMLINK3args, WRITE3args,
};
use nfs3_client::nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use scion_nfs::client_io::{Stream, Tcp};
use nfs3_client::{Nfs3Connection, Nfs3ConnectionBuilder};
use scion_daemon::{Engine, Router};
use scion_fs::{Fs, Kind, MountOptions, Stamp, ROOT_INO};
use scion_nfs::{NfsOptions, NfsServer, Squash};
use scion_store::host::{HostFile, HostFs, HostSpace, OpenMode};
use std::any::Any;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

type Conn = Nfs3Connection<Stream>;

struct Setup {
    tmp: tempfile::TempDir,
    engine: Engine,
    router: Arc<Router>,
}

fn setup() -> Setup {
    setup_on(scion_store::os_host())
}

fn setup_on(host: scion_store::Host) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    Fs::create(&host, &store).unwrap();
    let fs = Fs::open(&store, MountOptions { holder: "nfs test".into(), host }).unwrap();
    let engine = Engine::new(fs);
    let router = Arc::new(Router::new(engine.clone()).unwrap());
    Setup { tmp, engine, router }
}

impl Setup {
    fn store(&self) -> std::path::PathBuf {
        self.tmp.path().join("store")
    }

    /// The store closed and opened again, as a daemon's restart does (servers stopped first).
    fn restart(self) -> Setup {
        let Setup { tmp, engine, router } = self;
        drop(router);
        engine.close().unwrap();
        drop(engine);
        let host = scion_store::os_host();
        let fs = Fs::open(&tmp.path().join("store"), MountOptions { holder: "nfs test".into(), host }).unwrap();
        let engine = Engine::new(fs);
        let router = Arc::new(Router::new(engine.clone()).unwrap());
        Setup { tmp, engine, router }
    }

    /// The inode at `path` from the root, through the engine.
    fn ino(&self, path: &str) -> u64 {
        let mut fs = self.engine.lock();
        path.split('/').fold(ROOT_INO, |dir, n| fs.lookup(dir, n.as_bytes()).unwrap().ino)
    }

    /// Makes `path`'s last name in its parent (which exists) as `uid`, with `mode`.
    fn make(&self, path: &str, kind: Kind, mode: u32, uid: u32, data: &[u8]) -> u64 {
        let mut fs = self.engine.lock();
        let mut dir = ROOT_INO;
        let names: Vec<&str> = path.split('/').collect();
        for n in &names[..names.len() - 1] {
            dir = fs.lookup(dir, n.as_bytes()).unwrap().ino;
        }
        let fmt = if kind == Kind::Dir { libc::S_IFDIR } else { libc::S_IFREG };
        let a = fs.mknod(dir, names.last().unwrap().as_bytes(), kind, fmt | mode, 0, uid, uid, 0, &[]).unwrap();
        let mode_now = fs.getattr(a.ino).unwrap().perm;
        assert_eq!(u32::from(mode_now), mode, "{path}: mode");
        drop(fs);
        if !data.is_empty() {
            self.engine.write(a.ino, 0, data, Stamp::Now, |_| Ok(())).unwrap();
        }
        a.ino
    }

    fn serve(&self, f: impl FnOnce(&mut NfsOptions)) -> NfsServer {
        let mut o = NfsOptions::new("127.0.0.1:0");
        f(&mut o);
        scion_nfs::serve(self.router.clone(), o).unwrap()
    }
}

async fn connect(server: &NfsServer, path: &str, uid: u32, gid: u32) -> Result<Conn, String> {
    let cred = auth_unix { stamp: 1, machinename: Opaque::borrowed(b"test"), uid, gid, gids: vec![] };
    let port = server.addr().port();
    Nfs3ConnectionBuilder::new(Tcp, "127.0.0.1", path)
        .mount_port(port)
        .nfs3_port(port)
        .connect_from_privileged_port(false)
        .credential(opaque_auth::auth_unix(&cred))
        .mount()
        .await
        .map_err(|e| format!("{e:?}"))
}

fn res<T, E>(r: Nfs3Result<T, E>) -> Result<T, nfsstat3> {
    match r {
        Nfs3Result::Ok(v) => Ok(v),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

fn name(n: &str) -> filename3<'static> {
    filename3(Opaque::owned(n.as_bytes().to_vec()))
}

fn at(dir: &nfs_fh3, n: &str) -> diropargs3<'static> {
    diropargs3 { dir: dir.clone(), name: name(n) }
}

fn mode(m: u32) -> sattr3 {
    sattr3 { mode: Nfs3Option::Some(m), ..Default::default() }
}

async fn lookup(c: &mut Conn, dir: &nfs_fh3, n: &str) -> Result<nfs_fh3, nfsstat3> {
    res(c.lookup(&LOOKUP3args { what: at(dir, n) }).await.unwrap()).map(|r| r.object)
}

async fn getattr(c: &mut Conn, fh: &nfs_fh3) -> Result<fattr3, nfsstat3> {
    res(c.getattr(&GETATTR3args { object: fh.clone() }).await.unwrap()).map(|r| r.obj_attributes)
}

async fn create(c: &mut Conn, dir: &nfs_fh3, n: &str, m: u32) -> Result<nfs_fh3, nfsstat3> {
    let r = res(c.create(&CREATE3args { where_: at(dir, n), how: createhow3::UNCHECKED(mode(m)) }).await.unwrap())?;
    match r.obj {
        Nfs3Option::Some(fh) => Ok(fh),
        Nfs3Option::None => lookup(c, dir, n).await,
    }
}

async fn mkdir(c: &mut Conn, dir: &nfs_fh3, n: &str, m: u32) -> Result<nfs_fh3, nfsstat3> {
    let r = res(c.mkdir(&MKDIR3args { where_: at(dir, n), attributes: mode(m) }).await.unwrap())?;
    match r.obj {
        Nfs3Option::Some(fh) => Ok(fh),
        Nfs3Option::None => lookup(c, dir, n).await,
    }
}

async fn write(c: &mut Conn, fh: &nfs_fh3, off: u64, data: &[u8], stable: stable_how) -> Result<(stable_how, writeverf3), nfsstat3> {
    let args = WRITE3args { file: fh.clone(), offset: off, count: data.len() as u32, stable, data: Opaque::borrowed(data) };
    let r = res(c.write(&args).await.unwrap())?;
    assert_eq!(r.count as usize, data.len());
    Ok((r.committed, r.verf))
}

async fn commit(c: &mut Conn, fh: &nfs_fh3) -> Result<writeverf3, nfsstat3> {
    res(c.commit(&COMMIT3args { file: fh.clone(), offset: 0, count: 0 }).await.unwrap()).map(|r| r.verf)
}

async fn read(c: &mut Conn, fh: &nfs_fh3, off: u64, n: u32) -> Result<Vec<u8>, nfsstat3> {
    res(c.read(&READ3args { file: fh.clone(), offset: off, count: n }).await.unwrap()).map(|r| r.data.to_vec())
}

async fn remove(c: &mut Conn, dir: &nfs_fh3, n: &str) -> Result<(), nfsstat3> {
    res(c.remove(&REMOVE3args { object: at(dir, n) }).await.unwrap()).map(|_| ())
}

async fn setattr(c: &mut Conn, fh: &nfs_fh3, set: sattr3) -> Result<fattr3, nfsstat3> {
    let args = SETATTR3args { object: fh.clone(), new_attributes: set, guard: Nfs3Option::None };
    match res(c.setattr(&args).await.unwrap())?.obj_wcc.after {
        Nfs3Option::Some(a) => Ok(a),
        Nfs3Option::None => getattr(c, fh).await,
    }
}

/// Every name READDIRPLUS lists in `dir`, following cookies to the end.
async fn list(c: &mut Conn, dir: &nfs_fh3) -> Result<Vec<String>, nfsstat3> {
    let (mut cookie, mut verf, mut names) = (0, Default::default(), Vec::new());
    loop {
        let args = READDIRPLUS3args { dir: dir.clone(), cookie, cookieverf: verf, dircount: 8192, maxcount: 65536 };
        let r = res(c.readdirplus(&args).await.unwrap())?;
        verf = r.cookieverf;
        let entries = r.reply.entries.into_inner();
        for e in &entries {
            names.push(String::from_utf8_lossy(e.name.as_ref()).into_owned());
            cookie = e.cookie;
        }
        if r.reply.eof {
            return Ok(names);
        }
        assert!(!entries.is_empty(), "no progress at cookie {cookie}");
    }
}

fn handle_of(bytes: Vec<u8>) -> nfs_fh3 {
    nfs_fh3 { data: Opaque::owned(bytes) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_durable_as_asked_and_read_back() {
    let s = setup();
    s.make("pub", Kind::Dir, 0o777, 0, b"");
    let server = s.serve(|_| {});
    let mut c = connect(&server, "/pub", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let f = create(&mut c, &root, "f", 0o644).await.unwrap();
    assert_eq!(getattr(&mut c, &f).await.unwrap().uid, 1000);
    let big: Vec<u8> = (0..(3 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    let mut verfs = Vec::new();
    for (i, piece) in big.chunks(1 << 20).enumerate() {
        let (how, v) = write(&mut c, &f, (i << 20) as u64, piece, stable_how::UNSTABLE).await.unwrap();
        // Journaled, not yet synced: the client must COMMIT.
        assert_eq!(how, stable_how::UNSTABLE);
        verfs.push(v);
    }
    let v = commit(&mut c, &f).await.unwrap();
    assert!(verfs.iter().all(|w| *w == v), "one verifier for one server's life");
    let (how, _) = write(&mut c, &f, 5, b"sync", stable_how::FILE_SYNC).await.unwrap();
    assert_eq!(how, stable_how::FILE_SYNC);
    let (how, _) = write(&mut c, &f, 9, b"data", stable_how::DATA_SYNC).await.unwrap();
    assert_eq!(how, stable_how::FILE_SYNC);
    let mut want = big.clone();
    want[5..9].copy_from_slice(b"sync");
    want[9..13].copy_from_slice(b"data");
    let mut got = Vec::new();
    while got.len() < want.len() {
        got.extend(read(&mut c, &f, got.len() as u64, 1 << 20).await.unwrap());
    }
    assert!(got == want, "bytes read differ from bytes written");
    // READs of every length modulo 4, each followed by a call on the same connection: the
    // data goes out apart from the packed reply (vendor/nfs3_server patch 8), and a wrong
    // opaque length or padding would shift every later reply.
    for n in [0u32, 1, 2, 3, 4, 5, 4095, 65537, 131_074, (1 << 20) - 1] {
        let at = 1000 + u64::from(n % 7);
        let bytes = read(&mut c, &f, at, n).await.unwrap();
        assert!(bytes == want[at as usize..at as usize + n as usize], "READ of {n} bytes");
        assert_eq!(getattr(&mut c, &f).await.unwrap().size, want.len() as u64, "after a READ of {n} bytes");
    }
    let tail = read(&mut c, &f, want.len() as u64 - 3, 100).await.unwrap();
    assert!(tail == want[want.len() - 3..], "a READ cut at the end of the file");
    // Many names: READDIRPLUS pages through them all, once each.
    let d = mkdir(&mut c, &root, "many", 0o755).await.unwrap();
    for i in 0..1500 {
        create(&mut c, &d, &format!("n{i:04}"), 0o644).await.unwrap();
    }
    let mut names = list(&mut c, &d).await.unwrap();
    names.retain(|n| n != "." && n != "..");
    names.sort();
    let want: Vec<String> = (0..1500).map(|i| format!("n{i:04}")).collect();
    assert_eq!(names, want);
    assert_eq!(getattr(&mut c, &d).await.unwrap().mode, 0o755, "MKDIR's mode is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_altered_and_foreign_handles_reach_nothing() {
    let s = setup();
    s.make("pub", Kind::Dir, 0o777, 0, b"");
    s.make("pub/f", Kind::File, 0o644, 1000, b"hello");
    let server = s.serve(|_| {});
    let mut c = connect(&server, "/pub", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let f = lookup(&mut c, &root, "f").await.unwrap();
    assert_eq!(read(&mut c, &f, 0, 100).await.unwrap(), b"hello");
    let good = f.data.to_vec();
    for i in 0..good.len() {
        for bit in [1u8, 0x80] {
            let mut b = good.clone();
            b[i] ^= bit;
            let r = getattr(&mut c, &handle_of(b)).await;
            assert!(
                matches!(r, Err(nfsstat3::NFS3ERR_BADHANDLE | nfsstat3::NFS3ERR_STALE)),
                "byte {i} ^ {bit:#x}: {r:?}"
            );
        }
    }
    for len in [0, 8, 23, 25, 64] {
        let r = getattr(&mut c, &handle_of(vec![0x5a; len])).await;
        assert!(r.is_err(), "a made-up handle of {len} bytes: {r:?}");
    }
    // Another store's server (another key, another generation) takes none of this one's.
    let s2 = setup();
    s2.make("pub", Kind::Dir, 0o777, 0, b"");
    s2.make("pub/f", Kind::File, 0o644, 1000, b"other");
    let other = s2.serve(|_| {});
    let mut c2 = connect(&other, "/pub", 1000, 1000).await.unwrap();
    let r = getattr(&mut c2, &f).await;
    assert!(matches!(r, Err(nfsstat3::NFS3ERR_BADHANDLE | nfsstat3::NFS3ERR_STALE)), "{r:?}");
}

/// Every kind of handle a client may hold (a deep file, a directory, a clone's file, a
/// snapshot's file, a file with two names) names the same inode after the store is closed
/// and opened again: through the hints, through a walk when the hint is out of date (a
/// rename while the server was down) or missing; a file removed meanwhile is STALE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_survive_a_restart() {
    let s = setup();
    for d in ["d", "d/e", "d/e/f"] {
        s.make(d, Kind::Dir, 0o755, 0, b"");
    }
    for (f, data) in [("d/e/f/deep", "deep"), ("d/moved", "moved"), ("d/removed", "removed"), ("d/linked", "linked")] {
        s.make(f, Kind::File, 0o644, 0, data.as_bytes());
    }
    {
        let (d, linked) = (s.ino("d"), s.ino("d/linked"));
        let mut fs = s.engine.lock();
        fs.link(linked, d, b"linked2").unwrap();
        fs.clone_dir(d, ROOT_INO, b"vm1", &[], b"d").unwrap();
        fs.snapshot(d, b"v1", b"d").unwrap();
    }
    let server = s.serve(|o| o.identity.squash = Squash::None);
    let mut c = connect(&server, "/", 0, 0).await.unwrap();
    let root = c.root_nfs_fh3();
    let mut held = Vec::new();
    for (path, data) in [
        ("d/e/f/deep", "deep"),
        ("d/e", ""),
        ("d/moved", "moved"),
        ("d/linked2", "linked"),
        ("vm1/e/f/deep", "deep"),
        ("d/.snapshot/v1/e/f/deep", "deep"),
        ("d/.snapshot", ""),
        ("d/removed", "removed"),
    ] {
        let mut fh = root.clone();
        for n in path.split('/') {
            fh = lookup(&mut c, &fh, n).await.unwrap_or_else(|e| panic!("{path}: {e:?}"));
        }
        let id = getattr(&mut c, &fh).await.unwrap().fileid;
        held.push((path, data, fh, id));
    }
    server.stop();
    assert_eq!(s.store().join("nfs/key").metadata().unwrap().len(), 32);
    assert!(s.store().join("nfs/hints").exists(), "a stopped server leaves its hints");
    // While the server is down: a rename (its hint goes out of date) and a removal.
    let (d, f) = (s.ino("d"), s.ino("d/e/f"));
    s.engine.lock().rename(d, b"moved", f, b"moved-here", 0).unwrap();
    s.engine.lock().unlink(d, b"removed").unwrap();
    let mut s = s.restart();
    for round in ["hints", "walks"] {
        let server = s.serve(|o| o.identity.squash = Squash::None);
        let mut c = connect(&server, "/", 0, 0).await.unwrap();
        for (path, data, fh, id) in &held {
            if *path == "d/removed" {
                assert_eq!(getattr(&mut c, fh).await.err(), Some(nfsstat3::NFS3ERR_STALE), "{round}: {path}");
                continue;
            }
            let a = getattr(&mut c, fh).await.unwrap_or_else(|e| panic!("{round}: {path}: {e:?}"));
            assert_eq!(a.fileid, *id, "{round}: {path}");
            if !data.is_empty() {
                assert_eq!(read(&mut c, fh, 0, 100).await.unwrap(), data.as_bytes(), "{round}: {path}");
            }
        }
        // Found by hints but the renamed file (the file with two names counted among them: it
        // has a hint now, the name it was reached by, though the link table finds it); without
        // hints, by walks (4: the directories the first walk went through are loaded, and
        // found without either, as a file with two names is, through the link table).
        let (by_hint, by_walk) = server.revived();
        match round {
            "hints" => assert_eq!((by_hint, by_walk), (6, 1), "{round}"),
            _ => assert_eq!((by_hint, by_walk), (0, 4), "{round}"),
        }
        // The old handle of a directory still lists and creates in it.
        let e = &held[1].2;
        create(&mut c, e, &format!("new-{round}"), 0o644).await.unwrap();
        assert!(list(&mut c, e).await.unwrap().contains(&format!("new-{round}")));
        server.stop();
        if round == "hints" {
            std::fs::remove_file(s.store().join("nfs/hints")).unwrap();
        }
        s = s.restart();
    }
    // Restarted with other exports: an old handle reaches only what these export, and a
    // read-only directory holds for inodes found again by number (a clone's, here).
    let server = s.serve(|o| {
        o.identity.squash = Squash::None;
        o.exports = vec![b"d/e".to_vec(), b"vm1".to_vec()];
        o.read_only_dirs = vec![b"vm1/e".to_vec()];
    });
    let mut c = connect(&server, "/d/e", 0, 0).await.unwrap();
    let handle = |p: &str| held.iter().find(|h| h.0 == p).unwrap().2.clone();
    assert_eq!(read(&mut c, &handle("d/e/f/deep"), 0, 100).await.unwrap(), b"deep");
    for outside in ["d/linked2", "d/.snapshot", "d/.snapshot/v1/e/f/deep"] {
        assert_eq!(getattr(&mut c, &handle(outside)).await.err(), Some(nfsstat3::NFS3ERR_STALE), "{outside}");
    }
    let in_clone = handle("vm1/e/f/deep");
    assert_eq!(read(&mut c, &in_clone, 0, 100).await.unwrap(), b"deep");
    let w = write(&mut c, &in_clone, 0, b"x", stable_how::FILE_SYNC).await;
    assert_eq!(w.err(), Some(nfsstat3::NFS3ERR_ROFS), "a write below a read-only directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_files_and_destroyed_clones_are_stale() {
    let s = setup();
    s.make("src", Kind::Dir, 0o777, 0, b"");
    s.make("src/a", Kind::File, 0o644, 0, b"in the clone");
    {
        let mut fs = s.engine.lock();
        let src = fs.lookup(ROOT_INO, b"src").unwrap().ino;
        fs.clone_dir(src, ROOT_INO, b"vm1", &[], b"src").unwrap();
    }
    let server = s.serve(|o| o.identity.squash = Squash::None);
    let mut c = connect(&server, "/", 0, 0).await.unwrap();
    let root = c.root_nfs_fh3();
    let vm1 = lookup(&mut c, &root, "vm1").await.unwrap();
    let a = lookup(&mut c, &vm1, "a").await.unwrap();
    assert_eq!(read(&mut c, &a, 0, 100).await.unwrap(), b"in the clone");
    let src = lookup(&mut c, &root, "src").await.unwrap();
    let b = create(&mut c, &src, "b", 0o644).await.unwrap();
    let old_id = getattr(&mut c, &b).await.unwrap().fileid;
    remove(&mut c, &src, "b").await.unwrap();
    assert_eq!(getattr(&mut c, &b).await.err(), Some(nfsstat3::NFS3ERR_STALE));
    // A new file never takes a removed one's number, so an old handle never finds it.
    let b2 = create(&mut c, &src, "b", 0o644).await.unwrap();
    assert_ne!(getattr(&mut c, &b2).await.unwrap().fileid, old_id);
    assert_eq!(getattr(&mut c, &b).await.err(), Some(nfsstat3::NFS3ERR_STALE));
    // The clone destroyed: its files' handles are stale, not some other file.
    {
        let mut fs = s.engine.lock();
        let path = b"vm1".to_vec();
        scion_daemon::control::execute(
            &mut fs,
            &scion_daemon::control::Op::Destroy { target: scion_daemon::control::Target::Path(path), recursive: false },
            None,
        )
        .unwrap();
    }
    assert_eq!(getattr(&mut c, &a).await.err(), Some(nfsstat3::NFS3ERR_STALE));
    assert_eq!(getattr(&mut c, &vm1).await.err(), Some(nfsstat3::NFS3ERR_STALE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outside_an_export_is_reachable() {
    let s = setup();
    s.make("secret", Kind::File, 0o644, 0, b"outside");
    s.make("vm1", Kind::Dir, 0o755, 0, b"");
    s.make("vm1/etc", Kind::Dir, 0o755, 0, b"");
    let server = s.serve(|o| o.exports = vec![b"vm1".to_vec()]);
    assert!(connect(&server, "/", 1000, 1000).await.is_err(), "the root is not exported");
    assert!(connect(&server, "/secret", 1000, 1000).await.is_err());
    let mut c = connect(&server, "/vm1", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let id = getattr(&mut c, &root).await.unwrap().fileid;
    let up = lookup(&mut c, &root, "..").await.unwrap();
    assert_eq!(getattr(&mut c, &up).await.unwrap().fileid, id, ".. of the export's root is itself");
    assert_eq!(lookup(&mut c, &up, "secret").await, Err(nfsstat3::NFS3ERR_NOENT));
    let etc = lookup(&mut c, &root, "etc").await.unwrap();
    let up = lookup(&mut c, &etc, "..").await.unwrap();
    assert_eq!(getattr(&mut c, &up).await.unwrap().fileid, id);
    // A subdirectory of an export may be mounted.
    let mut c2 = connect(&server, "/vm1/etc", 1000, 1000).await.unwrap();
    let sub = c2.root_nfs_fh3();
    assert_eq!(getattr(&mut c2, &sub).await.unwrap().fileid, getattr(&mut c, &etc).await.unwrap().fileid);
    assert!(connect(&server, "/vm1/../secret", 1000, 1000).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_are_squashed_as_configured() {
    let s = setup();
    s.make("pub", Kind::Dir, 0o777, 0, b"");
    s.make("pub/rootonly", Kind::File, 0o600, 0, b"root's");
    for (squash, uid, want) in [(Squash::Root, 0, 65534), (Squash::None, 0, 0), (Squash::All, 1000, 4242), (Squash::Root, 1000, 1000)] {
        let server = s.serve(|o| {
            o.identity.squash = squash;
            o.identity.anon = (4242, 4242);
            if squash == Squash::Root {
                o.identity.anon = (65534, 65534);
            }
        });
        let mut c = connect(&server, "/pub", uid, uid).await.unwrap();
        let root = c.root_nfs_fh3();
        let n = format!("by-{uid}-{squash:?}");
        let f = create(&mut c, &root, &n, 0o644).await.unwrap();
        assert_eq!(getattr(&mut c, &f).await.unwrap().uid, want, "{squash:?}, uid {uid}");
        let secret = lookup(&mut c, &root, "rootonly").await.unwrap();
        let r = read(&mut c, &secret, 0, 10).await;
        if want == 0 {
            assert_eq!(r.unwrap(), b"root's");
        } else {
            assert_eq!(r, Err(nfsstat3::NFS3ERR_ACCES), "{squash:?}, uid {uid}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_are_the_kernels() {
    let s = setup();
    s.make("priv", Kind::Dir, 0o700, 0, b"");
    s.make("priv/x", Kind::File, 0o644, 0, b"x");
    s.make("tmp", Kind::Dir, 0o1777, 0, b"");
    s.make("tmp/anns", Kind::File, 0o666, 1000, b"ann's");
    s.make("tmp/prog", Kind::File, 0o6755, 1000, b"#!");
    let server = s.serve(|_| {});
    let mut ann = connect(&server, "/", 1000, 1000).await.unwrap();
    let mut bob = connect(&server, "/", 1001, 1001).await.unwrap();
    let root = ann.root_nfs_fh3();
    let p = lookup(&mut ann, &root, "priv").await.unwrap();
    assert_eq!(lookup(&mut ann, &p, "x").await, Err(nfsstat3::NFS3ERR_ACCES), "no search permission");
    assert_eq!(create(&mut ann, &p, "y", 0o644).await, Err(nfsstat3::NFS3ERR_ACCES));
    let tmp = lookup(&mut ann, &root, "tmp").await.unwrap();
    // The sticky bit: bob may write ann's file (mode 0666) but not remove or rename it.
    assert_eq!(remove(&mut bob, &tmp, "anns").await, Err(nfsstat3::NFS3ERR_ACCES));
    let rename = RENAME3args { from: at(&tmp, "anns"), to: at(&tmp, "bobs") };
    assert_eq!(res(bob.rename(&rename).await.unwrap()).map(|_| ()), Err(nfsstat3::NFS3ERR_ACCES));
    let anns = lookup(&mut bob, &tmp, "anns").await.unwrap();
    write(&mut bob, &anns, 0, b"BOB", stable_how::UNSTABLE).await.unwrap();
    // Only the owner changes the mode; only root gives a file away.
    assert_eq!(setattr(&mut bob, &anns, mode(0o777)).await.err(), Some(nfsstat3::NFS3ERR_PERM));
    let give = sattr3 { uid: Nfs3Option::Some(1001), ..Default::default() };
    assert_eq!(setattr(&mut ann, &anns, give).await.err(), Some(nfsstat3::NFS3ERR_PERM));
    assert_eq!(setattr(&mut ann, &anns, mode(0o600)).await.unwrap().mode, 0o600);
    assert_eq!(read(&mut bob, &anns, 0, 10).await, Err(nfsstat3::NFS3ERR_ACCES));
    // The owner may still write a file whose mode says otherwise (knfsd's owner override).
    assert_eq!(setattr(&mut ann, &anns, mode(0o400)).await.unwrap().mode, 0o400);
    write(&mut ann, &anns, 0, b"ANN", stable_how::FILE_SYNC).await.unwrap();
    // A write by anyone but root drops setuid and setgid (with group execute).
    let prog = lookup(&mut ann, &tmp, "prog").await.unwrap();
    assert_eq!(getattr(&mut ann, &prog).await.unwrap().mode, 0o6755);
    write(&mut ann, &prog, 0, b"#!/bin/sh", stable_how::UNSTABLE).await.unwrap();
    assert_eq!(getattr(&mut ann, &prog).await.unwrap().mode, 0o755);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_directories_refuse_every_change() {
    let s = setup();
    s.make("gold", Kind::Dir, 0o777, 0, b"");
    s.make("gold/sub", Kind::Dir, 0o777, 0, b"");
    s.make("gold/sub/f", Kind::File, 0o666, 0, b"golden");
    s.make("gold/sub/d", Kind::Dir, 0o777, 0, b"");
    s.make("work", Kind::Dir, 0o777, 0, b"");
    let server = s.serve(|o| o.read_only_dirs = vec![b"gold".to_vec()]);
    let mut c = connect(&server, "/", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let gold = lookup(&mut c, &root, "gold").await.unwrap();
    let sub = lookup(&mut c, &gold, "sub").await.unwrap();
    let f = lookup(&mut c, &sub, "f").await.unwrap();
    let work = lookup(&mut c, &root, "work").await.unwrap();
    const ROFS: Result<(), nfsstat3> = Err(nfsstat3::NFS3ERR_ROFS);
    assert_eq!(write(&mut c, &f, 0, b"x", stable_how::UNSTABLE).await.map(|_| ()), ROFS);
    assert_eq!(setattr(&mut c, &f, mode(0o600)).await.map(|_| ()), ROFS);
    let trunc = sattr3 { size: Nfs3Option::Some(0), ..Default::default() };
    assert_eq!(setattr(&mut c, &f, trunc).await.map(|_| ()), ROFS);
    assert_eq!(create(&mut c, &sub, "new", 0o644).await.map(|_| ()), ROFS);
    assert_eq!(mkdir(&mut c, &sub, "newd", 0o755).await.map(|_| ()), ROFS);
    assert_eq!(remove(&mut c, &sub, "f").await, ROFS);
    assert_eq!(res(c.rmdir(&RMDIR3args { object: at(&sub, "d") }).await.unwrap()).map(|_| ()), ROFS);
    let out = RENAME3args { from: at(&sub, "f"), to: at(&work, "stolen") };
    assert_eq!(res(c.rename(&out).await.unwrap()).map(|_| ()), ROFS);
    let link = LINK3args { file: f.clone(), link: at(&work, "f2") };
    assert_eq!(res(c.link(&link).await.unwrap()).map(|_| ()), ROFS, "a name outside would make it writable");
    let sym = SYMLINK3args {
        where_: at(&sub, "l"),
        symlink: symlinkdata3 { symlink_attributes: sattr3::default(), symlink_data: nfspath3(Opaque::borrowed(b"f")) },
    };
    assert_eq!(res(c.symlink(&sym).await.unwrap()).map(|_| ()), ROFS);
    assert_eq!(read(&mut c, &f, 0, 100).await.unwrap(), b"golden");
    // Beside it, changes go on.
    let w = create(&mut c, &work, "w", 0o644).await.unwrap();
    write(&mut c, &w, 0, b"ok", stable_how::FILE_SYNC).await.unwrap();
    drop(server);
    // A whole read-only server.
    let server = s.serve(|o| o.read_only = true);
    let mut c = connect(&server, "/", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let work = lookup(&mut c, &root, "work").await.unwrap();
    let w = lookup(&mut c, &work, "w").await.unwrap();
    assert_eq!(write(&mut c, &w, 0, b"x", stable_how::UNSTABLE).await.map(|_| ()), ROFS);
    assert_eq!(create(&mut c, &work, "v", 0o644).await.map(|_| ()), ROFS);
    assert_eq!(read(&mut c, &w, 0, 10).await.unwrap(), b"ok");
}

/// A file with several names has no one directory: after a restart, its handle is found in
/// an export by the name a client reached it by, if that name still names it, and is STALE
/// once its only names lie outside the exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_two_names_is_found_in_its_export_after_a_restart() {
    let s = setup();
    for d in ["d", "out"] {
        s.make(d, Kind::Dir, 0o755, 0, b"");
    }
    let f = s.make("d/f", Kind::File, 0o644, 0, b"twice");
    let out = s.ino("out");
    s.engine.lock().link(f, out, b"f2").unwrap();
    s.make("d/g", Kind::File, 0o644, 0, b"listed");
    let g = s.ino("d/g");
    s.engine.lock().link(g, out, b"g2").unwrap();
    let serve = |s: &Setup| {
        s.serve(|o| {
            o.identity.squash = Squash::None;
            o.exports = vec![b"d".to_vec()];
        })
    };
    let server = serve(&s);
    let mut c = connect(&server, "/d", 0, 0).await.unwrap();
    let root = c.root_nfs_fh3();
    let fh = lookup(&mut c, &root, "f").await.unwrap();
    // Reached by a listing rather than a lookup.
    let args = READDIRPLUS3args { dir: root.clone(), cookie: 0, cookieverf: Default::default(), dircount: 8192, maxcount: 65536 };
    let entries = res(c.readdirplus(&args).await.unwrap()).unwrap().reply.entries.into_inner();
    let gh = match &entries.iter().find(|e| e.name.as_ref() == b"g").unwrap().name_handle {
        Nfs3Option::Some(h) => h.clone(),
        Nfs3Option::None => panic!("no handle for g in the listing"),
    };
    server.stop();
    let s = s.restart();
    let server = serve(&s);
    let mut c = connect(&server, "/d", 0, 0).await.unwrap();
    assert_eq!(read(&mut c, &fh, 0, 100).await.unwrap(), b"twice", "a file with two names after a restart");
    assert_eq!(read(&mut c, &gh, 0, 100).await.unwrap(), b"listed");
    server.stop();
    // Its name in the export removed while the server was down: only `out/f2` is left.
    let d = s.ino("d");
    s.engine.lock().unlink(d, b"f").unwrap();
    let s = s.restart();
    let server = serve(&s);
    let mut c = connect(&server, "/d", 0, 0).await.unwrap();
    assert_eq!(getattr(&mut c, &fh).await.err(), Some(nfsstat3::NFS3ERR_STALE), "reached outside its export");
    assert_eq!(read(&mut c, &gh, 0, 100).await.unwrap(), b"listed");
}

/// A cube is a store of its own hung at a directory of the main volume (as the daemon's
/// cube table does it): the directory shows the cube's root.
fn cube_at(s: &Setup, dir: &str) -> scion_daemon::router::VolumeId {
    let host = scion_store::os_host();
    let store = s.tmp.path().join(format!("cube-{}", dir.replace('/', "-")));
    Fs::create(&host, &store).unwrap();
    let mut fs = Fs::open(&store, MountOptions { holder: "nfs test cube".into(), host }).unwrap();
    fs.setattr(ROOT_INO, scion_fs::SetAttr { mode: Some(0o777), ..Default::default() }).unwrap();
    let vol = s.router.add(Engine::new(fs)).unwrap();
    let names: Vec<&str> = dir.split('/').collect();
    let above: Vec<u64> = (1..names.len()).map(|n| s.ino(&names[..n].join("/"))).collect();
    s.router.graft(scion_daemon::router::VolumeId::MAIN, s.ino(dir), above, vol);
    vol
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cube_below_a_read_only_directory_refuses_changes_and_its_dotdot_leads_out() {
    let s = setup();
    s.make("gold", Kind::Dir, 0o777, 0, b"");
    s.make("gold/q", Kind::Dir, 0o777, 0, b"");
    s.make("work", Kind::Dir, 0o777, 0, b"");
    s.make("work/q", Kind::Dir, 0o777, 0, b"");
    cube_at(&s, "gold/q");
    cube_at(&s, "work/q");
    let server = s.serve(|o| o.read_only_dirs = vec![b"gold".to_vec()]);
    let mut c = connect(&server, "/", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let gold = lookup(&mut c, &root, "gold").await.unwrap();
    let frozen = lookup(&mut c, &gold, "q").await.unwrap();
    let work = lookup(&mut c, &root, "work").await.unwrap();
    let open = lookup(&mut c, &work, "q").await.unwrap();
    // The cube's root is not the directory it hangs at: another volume, its own inode.
    assert_ne!(getattr(&mut c, &frozen).await.unwrap().fileid, s.ino("gold/q"));
    assert_eq!(create(&mut c, &frozen, "new", 0o644).await.map(|_| ()), Err(nfsstat3::NFS3ERR_ROFS), "a cube inside a read-only directory took a change");
    assert_eq!(mkdir(&mut c, &frozen, "d", 0o755).await.map(|_| ()), Err(nfsstat3::NFS3ERR_ROFS));
    let f = create(&mut c, &open, "f", 0o644).await.unwrap();
    write(&mut c, &f, 0, b"ok", stable_how::FILE_SYNC).await.unwrap();
    // `..` of a cube's root is the directory above the one it hangs at, not the cube again.
    for (cube, above) in [(&frozen, &gold), (&open, &work)] {
        let up = lookup(&mut c, cube, "..").await.unwrap();
        assert_eq!(getattr(&mut c, &up).await.unwrap().fileid, getattr(&mut c, above).await.unwrap().fileid);
    }
    let args = READDIRPLUS3args { dir: open.clone(), cookie: 0, cookieverf: Default::default(), dircount: 8192, maxcount: 65536 };
    let entries = res(c.readdirplus(&args).await.unwrap()).unwrap().reply.entries.into_inner();
    let dotdot = entries.iter().find(|e| e.name.as_ref() == b"..").unwrap();
    assert_eq!(dotdot.fileid, getattr(&mut c, &work).await.unwrap().fileid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_verifier_changes_with_the_server() {
    let s = setup();
    s.make("pub", Kind::Dir, 0o777, 0, b"");
    let server = s.serve(|_| {});
    let mut c = connect(&server, "/pub", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let f = create(&mut c, &root, "f", 0o644).await.unwrap();
    let (_, v1) = write(&mut c, &f, 0, b"one", stable_how::UNSTABLE).await.unwrap();
    server.stop();
    // Clients resend UNSTABLE writes when the verifier changes (a restart may have lost them).
    std::thread::sleep(std::time::Duration::from_millis(5));
    let server = s.serve(|_| {});
    let mut c = connect(&server, "/pub", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let f2 = lookup(&mut c, &root, "f").await.unwrap();
    let (_, v2) = write(&mut c, &f2, 0, b"two", stable_how::UNSTABLE).await.unwrap();
    assert_ne!(v1, v2);
    assert_eq!(commit(&mut c, &f2).await.unwrap(), v2);
}

/// The real filesystem, counting the syncs the store asks for.
struct CountingHost {
    inner: scion_store::Host,
    syncs: Arc<AtomicUsize>,
}

struct CountingFile {
    inner: Arc<dyn HostFile>,
    syncs: Arc<AtomicUsize>,
}

impl HostFile for CountingFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        self.inner.sync_data()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.punch_hole(offset, len)
    }
    fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.allocate(offset, len)
    }
}

impl HostFs for CountingHost {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn HostFile>> {
        Ok(Arc::new(CountingFile { inner: self.inner.open(path, mode)?, syncs: self.syncs.clone() }))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        self.inner.sync_dir(path)
    }
    fn allocated_bytes(&self, path: &Path) -> io::Result<u64> {
        self.inner.allocated_bytes(path)
    }
    fn space(&self, path: &Path) -> io::Result<HostSpace> {
        self.inner.space(path)
    }
    fn lock(&self, dir: &Path, holder: &str) -> scion_store::Result<Box<dyn Any + Send>> {
        self.inner.lock(dir, holder)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_and_stable_writes_sync_and_unstable_ones_do_not() {
    let syncs = Arc::new(AtomicUsize::new(0));
    let s = setup_on(Arc::new(CountingHost { inner: scion_store::os_host(), syncs: syncs.clone() }));
    s.make("pub", Kind::Dir, 0o777, 0, b"");
    let server = s.serve(|_| {});
    let mut c = connect(&server, "/pub", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let f = create(&mut c, &root, "f", 0o644).await.unwrap();
    let before = syncs.load(Ordering::SeqCst);
    for k in 0..8u64 {
        write(&mut c, &f, k << 16, &[k as u8; 1 << 16], stable_how::UNSTABLE).await.unwrap();
    }
    assert_eq!(syncs.load(Ordering::SeqCst), before, "an UNSTABLE write waited for a sync");
    commit(&mut c, &f).await.unwrap();
    let after_commit = syncs.load(Ordering::SeqCst);
    assert!(after_commit > before, "COMMIT answered without a sync");
    write(&mut c, &f, 0, b"stable", stable_how::FILE_SYNC).await.unwrap();
    assert!(syncs.load(Ordering::SeqCst) > after_commit, "a FILE_SYNC write answered without a sync");
}

/// Past `max_held` the sweep gives back the oldest inodes (their engine memory); their
/// handles still work, found again by number without a walk, and the export's root stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_inodes_are_bounded_and_found_again() {
    let s = setup();
    s.make("pub", Kind::Dir, 0o777, 0, b"");
    let server = s.serve(|o| o.max_held = 16);
    let mut c = connect(&server, "/pub", 1000, 1000).await.unwrap();
    let root = c.root_nfs_fh3();
    let mut files = Vec::new();
    for i in 0..100 {
        let fh = create(&mut c, &root, &format!("f{i}"), 0o644).await.unwrap();
        write(&mut c, &fh, 0, format!("file {i}").as_bytes(), stable_how::FILE_SYNC).await.unwrap();
        files.push(fh);
    }
    assert!(server.held() > 100, "{} held", server.held());
    server.sweep();
    assert!(server.held() <= 16, "{} held after the sweep", server.held());
    for (i, fh) in files.iter().enumerate() {
        assert_eq!(read(&mut c, fh, 0, 100).await.unwrap(), format!("file {i}").as_bytes(), "f{i}");
    }
    assert_eq!(server.revived().1, 0, "a walk for an inode given back");
    assert!(server.held() > 100, "{} held after the reads", server.held());
    assert_eq!(list(&mut c, &root).await.unwrap().iter().filter(|n| n.starts_with('f')).count(), 100);
    server.sweep();
    assert!(server.held() <= 16, "{} held after the second sweep", server.held());
}
