//! `scion serve nfs` killed (SIGKILL) while a client writes: every byte the client saw
//! committed (COMMIT answered, or a FILE_SYNC write) is there after a restart, and the write
//! verifier has changed so the client knows to resend the rest. A real NFSv3 client
//! (`nfs3_client`) against the real binary serving a store that is not mounted.

use nfs3_client::nfs3_types::nfs3::{
    createhow3, diropargs3, filename3, nfs_fh3, nfsstat3, sattr3, stable_how, writeverf3, Nfs3Option, Nfs3Result,
    COMMIT3args, CREATE3args, LOOKUP3args, READ3args, WRITE3args,
};
use nfs3_client::nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use scion_nfs::client_io::{Stream, Tcp};
use nfs3_client::{Nfs3Connection, Nfs3ConnectionBuilder};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

type Conn = Nfs3Connection<Stream>;

const SCION: &str = env!("CARGO_BIN_EXE_scion");

/// Starts `scion serve nfs --store STORE` on a free port; returns it and the port.
fn serve(store: &Path) -> (Child, u16) {
    let mut child = Command::new(SCION)
        .args(["serve", "nfs", "--listen", "127.0.0.1:0", "--squash", "none", "--store"])
        .arg(store)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("scion serve nfs");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let port = loop {
        let line = lines.next().expect("scion serve nfs ended before it listened").unwrap();
        if let Some(rest) = line.split(" on 127.0.0.1:").nth(1) {
            break rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
        }
    };
    // Keep draining its stderr so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, port)
}

async fn connect(port: u16) -> Conn {
    let cred = auth_unix { stamp: 1, machinename: Opaque::borrowed(b"crash"), uid: 0, gid: 0, gids: vec![] };
    Nfs3ConnectionBuilder::new(Tcp, "127.0.0.1", "/")
        .mount_port(port)
        .nfs3_port(port)
        .connect_from_privileged_port(false)
        .credential(opaque_auth::auth_unix(&cred))
        .mount()
        .await
        .expect("mount over NFS")
}

fn res<T, E>(r: Nfs3Result<T, E>) -> Result<T, nfsstat3> {
    match r {
        Nfs3Result::Ok(v) => Ok(v),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

fn at(dir: &nfs_fh3, n: &str) -> diropargs3<'static> {
    diropargs3 { dir: dir.clone(), name: filename3(Opaque::owned(n.as_bytes().to_vec())) }
}

async fn create(c: &mut Conn, dir: &nfs_fh3, n: &str) -> Result<nfs_fh3, String> {
    let args = CREATE3args { where_: at(dir, n), how: createhow3::UNCHECKED(sattr3::default()) };
    let r = res(c.create(&args).await.map_err(|e| format!("{e:?}"))?).map_err(|e| format!("{e:?}"))?;
    match r.obj {
        Nfs3Option::Some(fh) => Ok(fh),
        Nfs3Option::None => Err("no handle".into()),
    }
}

async fn write(c: &mut Conn, fh: &nfs_fh3, off: u64, data: &[u8], stable: stable_how) -> Result<writeverf3, String> {
    let args = WRITE3args { file: fh.clone(), offset: off, count: data.len() as u32, stable, data: Opaque::borrowed(data) };
    let r = res(c.write(&args).await.map_err(|e| format!("{e:?}"))?).map_err(|e| format!("{e:?}"))?;
    Ok(r.verf)
}

async fn commit(c: &mut Conn, fh: &nfs_fh3) -> Result<writeverf3, String> {
    let r = c.commit(&COMMIT3args { file: fh.clone(), offset: 0, count: 0 }).await.map_err(|e| format!("{e:?}"))?;
    res(r).map(|r| r.verf).map_err(|e| format!("{e:?}"))
}

/// Bytes of a deterministic pseudo-random file `i`.
fn content(i: usize, len: usize) -> Vec<u8> {
    let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const PIECE: usize = 64 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_writes_survive_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let st = Command::new(SCION).arg("init").arg(&store).stdout(Stdio::null()).status().unwrap();
    assert!(st.success(), "scion init");
    let (mut child, port) = serve(&store);
    let mut c = connect(port).await;
    let root = c.root_nfs_fh3();
    // Files committed one way or the other; then more written UNSTABLE and never committed,
    // while the server is killed.
    let mut committed = Vec::new();
    let mut verf = None;
    for i in 0..24 {
        let len = PIECE * (1 + i % 4) + i * 1000;
        let data = content(i, len);
        let fh = create(&mut c, &root, &format!("c{i}")).await.unwrap();
        let by_commit = i % 3 != 0;
        for (k, piece) in data.chunks(PIECE).enumerate() {
            let how = if by_commit { stable_how::UNSTABLE } else { stable_how::FILE_SYNC };
            let v = write(&mut c, &fh, (k * PIECE) as u64, piece, how).await.unwrap();
            assert!(verf.is_none_or(|w| w == v), "the verifier changed while the server ran");
            verf = Some(v);
        }
        if by_commit {
            assert_eq!(commit(&mut c, &fh).await.unwrap(), verf.unwrap());
        }
        committed.push((format!("c{i}"), data, fh));
    }
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        child.kill().unwrap();
        child.wait().unwrap()
    });
    let mut unsynced = 0;
    'writing: for i in 0.. {
        let Ok(fh) = create(&mut c, &root, &format!("u{i}")).await else { break };
        for k in 0..16u64 {
            if write(&mut c, &fh, k * PIECE as u64, &content(1000 + i, PIECE), stable_how::UNSTABLE).await.is_err() {
                break 'writing;
            }
            unsynced += 1;
        }
    }
    let status = killer.join().unwrap();
    assert!(!status.success(), "the server was killed");
    assert!(unsynced > 0, "no write was in flight at the kill");

    let (mut child, port) = serve(&store);
    let mut c = connect(port).await;
    let root = c.root_nfs_fh3();
    // The handles from before the crash name the same files (found by the hints the last
    // sweep left, or by walks): a client goes on with them.
    for (name, data, old) in &committed {
        let mut got = Vec::new();
        loop {
            let args = READ3args { file: old.clone(), offset: got.len() as u64, count: 1 << 20 };
            let r = res(c.read(&args).await.unwrap()).unwrap_or_else(|e| panic!("{name}, committed: its handle from before the crash: {e:?}"));
            got.extend_from_slice(&r.data);
            if r.eof || r.data.is_empty() {
                break;
            }
        }
        assert!(got == *data, "{name}: {} bytes after the crash, {} committed, or other bytes", got.len(), data.len());
        let fh = res(c.lookup(&LOOKUP3args { what: at(&root, name) }).await.unwrap())
            .unwrap_or_else(|e| panic!("{name}, committed, is gone after the crash: {e:?}"))
            .object;
        assert_eq!(fh.data.to_vec(), old.data.to_vec(), "{name}: another handle after the restart");
    }
    // A new life, a new verifier: the client resends what it had not seen committed.
    let fh = create(&mut c, &root, "after").await.unwrap();
    let v = write(&mut c, &fh, 0, b"x", stable_how::UNSTABLE).await.unwrap();
    assert_ne!(Some(v), verf, "the write verifier did not change at the restart");
    // SIGTERM: a clean stop, with the final checkpoint.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert!(st.success(), "scion serve nfs --store after SIGTERM: {st}");
}
