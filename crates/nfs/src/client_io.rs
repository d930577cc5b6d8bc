//! A TCP transport for `nfs3_client` that ends at end of file. The crate's own (`TokioIo`)
//! returns a read of 0 bytes as success, and its `async_read_exact` then loops on it without
//! ever yielding: a peer that closes its side (a server killed, rpcbind restarted) makes a
//! client spin on a CPU forever, past any timeout. Here a read of 0 bytes into a non-empty
//! buffer is `UnexpectedEof`, so the call fails. Used by the rpcbind registration and by the
//! tests' clients.

use nfs3_client::io::{AsyncRead, AsyncWrite};
use nfs3_client::net::Connector;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A connected stream (`Tcp::connect`).
pub struct Stream(TcpStream);

impl AsyncRead for Stream {
    async fn async_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read(buf).await?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(n)
    }
}

impl AsyncWrite for Stream {
    async fn async_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.0.write(buf).await?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WriteZero.into());
        }
        Ok(n)
    }
}

/// Connects `Stream`s, with no delay on small writes (a call is one write).
pub struct Tcp;

impl Connector for Tcp {
    type Connection = Stream;

    async fn connect(&self, addr: SocketAddr) -> io::Result<Stream> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Stream(s))
    }

    async fn connect_with_port(&self, addr: SocketAddr, local_port: u16) -> io::Result<Stream> {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, local_port)))?;
        let s = socket.connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Stream(s))
    }
}
