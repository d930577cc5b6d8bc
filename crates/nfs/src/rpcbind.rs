//! Registration with rpcbind (portmap version 2), when it runs: a client that asks it (a Linux
//! client mounting without `port=` and `mountport=`) then finds MOUNT and NFS on the server's
//! one port. Without rpcbind the server serves all the same; clients give the port.

use crate::client_io::{Stream, Tcp};
use nfs3_client::net::Connector;
use nfs3_client::nfs3_types::portmap::{mapping, IPPROTO_TCP, PMAP_PORT, PROGRAM, VERSION};
use nfs3_client::rpc::RpcClient;
use std::net::SocketAddr;
use std::time::Duration;

const NFS_PROGRAM: u32 = 100_003;
const MOUNT_PROGRAM: u32 = 100_005;
const SET: u32 = 1;
const UNSET: u32 = 2;
/// rpcbind may be slow or wedged: registration never holds the server up longer.
const PATIENCE: Duration = Duration::from_secs(2);

/// Registers (or, with `on` false, unregisters) NFS 3 and MOUNT 3 over TCP at `port`.
/// Returns whether rpcbind took it; no rpcbind is `Ok(false)`.
pub async fn register(port: u16, on: bool) -> Result<bool, String> {
    match tokio::time::timeout(PATIENCE, exchange(port, on)).await {
        Ok(r) => r,
        Err(_) => Err("rpcbind did not answer".into()),
    }
}

async fn exchange(port: u16, on: bool) -> Result<bool, String> {
    let at = SocketAddr::from(([127, 0, 0, 1], PMAP_PORT));
    let Some(io) = connect(at).await else { return Ok(false) };
    let mut rpc = RpcClient::new(io);
    let mut took = true;
    for prog in [NFS_PROGRAM, MOUNT_PROGRAM] {
        // A registration left by an earlier server (ours or another) is replaced.
        let m = mapping { prog, vers: 3, prot: IPPROTO_TCP, port: 0 };
        rpc.call::<mapping, bool>(PROGRAM, VERSION, UNSET, &m).await.map_err(|e| format!("rpcbind: {e:?}"))?;
        if on {
            let m = mapping { prog, vers: 3, prot: IPPROTO_TCP, port: u32::from(port) };
            took &= rpc.call::<mapping, bool>(PROGRAM, VERSION, SET, &m).await.map_err(|e| format!("rpcbind: {e:?}"))?;
        }
    }
    Ok(took)
}

/// rpcbind takes SET and UNSET only from a privileged port: root binds one.
async fn connect(at: SocketAddr) -> Option<Stream> {
    if unsafe { libc::geteuid() } == 0 {
        for local in (600..1024).rev() {
            match Tcp.connect_with_port(at, local).await {
                Ok(io) => return Some(io),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(_) => return None,
            }
        }
    }
    Tcp.connect(at).await.ok()
}
