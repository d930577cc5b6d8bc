//! Round trips of one NFSv3 call at a time, as fuse-nfs makes them: WRITEs of SIZE bytes
//! (UNSTABLE, one after another into a new file, then a COMMIT) or READs of SIZE bytes of
//! that file, against any NFSv3 server. For `bench/nfs`'s write and read rows, to tell the
//! server's part of a round trip from the client's.
//!
//!   cargo run --release -p scion-nfs --example nfs_rtt -- HOST NFSPORT MOUNTPORT EXPORT [COUNT] [SIZE]
//!
//! With `NFS_RTT_FILE=NAME` it only reads NAME, an existing file in the export's root, in
//! READs of SIZE bytes from its start (COUNT of them, or to its end): a server's read path
//! alone, on a file written any way (cold if the caches were dropped).
//!
//! Prints the calls' mean, median and 99th percentile in microseconds, per operation.

use nfs3_client::nfs3_types::nfs3::{
    createhow3, diropargs3, LOOKUP3args, filename3, nfs_fh3, sattr3, stable_how, Nfs3Option, Nfs3Result, COMMIT3args, CREATE3args,
    READ3args, REMOVE3args, WRITE3args,
};
use nfs3_client::nfs3_types::rpc::{auth_unix, opaque_auth};
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use nfs3_client::{Nfs3Connection, Nfs3ConnectionBuilder};
use scion_nfs::client_io::{Stream, Tcp};
use std::time::Instant;

fn summary(op: &str, mut us: Vec<f64>) {
    us.sort_by(|a, b| a.total_cmp(b));
    let mean = us.iter().sum::<f64>() / us.len() as f64;
    let at = |q: f64| us[((us.len() as f64 * q) as usize).min(us.len() - 1)];
    println!("{op}: {} calls, mean {mean:.1} us, median {:.1} us, p99 {:.1} us", us.len(), at(0.5), at(0.99));
}

/// COUNT READs of SIZE bytes from the file's start, one at a time, timed; each checked
/// against `want` if given, and stopping at the end of the file.
async fn reads(c: &mut Nfs3Connection<Stream>, fh: &nfs_fh3, count: usize, size: usize, want: Option<&[u8]>) {
    let mut us = Vec::with_capacity(count);
    for i in 0..count {
        let args = READ3args { file: fh.clone(), offset: (i * size) as u64, count: size as u32 };
        let t = Instant::now();
        let r = c.read(&args).await.expect("READ");
        us.push(t.elapsed().as_secs_f64() * 1e6);
        match r {
            Nfs3Result::Ok(r) => {
                if let Some(want) = want {
                    assert_eq!(&r.data[..], want, "READ {i} gave other bytes");
                }
                if r.eof {
                    break;
                }
            }
            Nfs3Result::Err((s, _)) => panic!("READ: {s:?}"),
        }
    }
    summary("READ", us);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: nfs_rtt HOST NFSPORT MOUNTPORT EXPORT [COUNT] [SIZE]");
        std::process::exit(2);
    }
    let port: u16 = a[2].parse().expect("NFSPORT");
    let mport: u16 = a[3].parse().expect("MOUNTPORT");
    let count: usize = a.get(5).map_or(10_000, |s| s.parse().expect("COUNT"));
    let size: usize = a.get(6).map_or(4096, |s| s.parse().expect("SIZE"));
    let cred = auth_unix { stamp: 1, machinename: Opaque::borrowed(b"rtt"), uid: 0, gid: 0, gids: vec![] };
    let mut c = Nfs3ConnectionBuilder::new(Tcp, a[1].clone(), a[4].clone())
        .mount_port(mport)
        .nfs3_port(port)
        .connect_from_privileged_port(false)
        .credential(opaque_auth::auth_unix(&cred))
        .mount()
        .await
        .unwrap_or_else(|e| panic!("mount of {}: {e:?}", a[4]));
    let root: nfs_fh3 = c.root_nfs_fh3();
    if let Ok(name) = std::env::var("NFS_RTT_FILE") {
        let args = LOOKUP3args { what: diropargs3 { dir: root.clone(), name: filename3(Opaque::owned(name.into_bytes())) } };
        let fh = match c.lookup(&args).await.expect("LOOKUP") {
            Nfs3Result::Ok(r) => r.object,
            Nfs3Result::Err((s, _)) => panic!("LOOKUP: {s:?}"),
        };
        reads(&mut c, &fh, count, size, None).await;
        return;
    }
    let at = || diropargs3 { dir: root.clone(), name: filename3(Opaque::owned(b"nfs-rtt".to_vec())) };
    let how = createhow3::UNCHECKED(sattr3 { mode: Nfs3Option::Some(0o644), ..Default::default() });
    let fh = match c.create(&CREATE3args { where_: at(), how }).await.expect("CREATE") {
        Nfs3Result::Ok(r) => match r.obj {
            Nfs3Option::Some(fh) => fh,
            Nfs3Option::None => panic!("CREATE gave no handle"),
        },
        Nfs3Result::Err((s, _)) => panic!("CREATE: {s:?}"),
    };
    let data: Vec<u8> = (0..size).map(|i| (i * 7 + 1) as u8).collect();
    let mut us = Vec::with_capacity(count);
    for i in 0..count {
        let args = WRITE3args {
            file: fh.clone(),
            offset: (i * size) as u64,
            count: size as u32,
            stable: stable_how::UNSTABLE,
            data: Opaque::borrowed(&data),
        };
        let t = Instant::now();
        let r = c.write(&args).await.expect("WRITE");
        us.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(matches!(r, Nfs3Result::Ok(_)), "WRITE failed");
    }
    summary("WRITE", us);
    let t = Instant::now();
    let r = c.commit(&COMMIT3args { file: fh.clone(), offset: 0, count: 0 }).await.expect("COMMIT");
    assert!(matches!(r, Nfs3Result::Ok(_)), "COMMIT failed");
    println!("COMMIT: {:.1} us", t.elapsed().as_secs_f64() * 1e6);
    reads(&mut c, &fh, count, size, Some(&data)).await;
    let _ = c.remove(&REMOVE3args { object: at() }).await;
}
