//! A slow or failing object store, for real: a TCP proxy in front of the S3 server that passes
//! bytes through, delays them, refuses connections or cuts them mid-transfer, as the current
//! [`StoreFault`] says.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the proxy treats connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum StoreFault {
    /// Bytes pass through.
    #[default]
    None,
    /// Every chunk waits this long in each direction.
    Slow(Duration),
    /// Connections are closed as soon as they are accepted.
    Refuse,
    /// Connections are cut after this many bytes from the client (mid-upload).
    CutAfter(usize),
}

/// The running proxy; stops when dropped.
pub struct StoreProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    fault: Arc<Mutex<StoreFault>>,
    task: tokio::task::JoinHandle<()>,
}

impl StoreProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let fault = Arc::new(Mutex::new(StoreFault::None));
        let shared = fault.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let now = *shared.lock().expect("fault lock");
                tokio::spawn(serve(client, upstream, now, shared.clone()));
            }
        });
        Ok(Self { addr, fault, task })
    }

    /// Sets how new and running connections are treated.
    pub fn set(&self, fault: StoreFault) {
        *self.fault.lock().expect("fault lock") = fault;
    }
}

impl Drop for StoreProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    at_accept: StoreFault,
    fault: Arc<Mutex<StoreFault>>,
) {
    if at_accept == StoreFault::Refuse {
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let current = || *fault.lock().expect("fault lock");
    let upload = async {
        let mut sent = 0usize;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                // The client is done sending; the answer may still be on its way.
                server_write.shutdown().await?;
                return std::future::pending().await;
            }
            match current() {
                StoreFault::Slow(d) => tokio::time::sleep(d).await,
                StoreFault::CutAfter(limit) if sent + n > limit => return Ok(()),
                StoreFault::Refuse => return Ok(()),
                _ => {}
            }
            sent += n;
            server_write.write_all(&buf[..n]).await?;
        }
    };
    let download = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = server_read.read(&mut buf).await?;
            if n == 0 {
                return client_write.shutdown().await;
            }
            match current() {
                StoreFault::Slow(d) => tokio::time::sleep(d).await,
                StoreFault::Refuse => return Ok(()),
                _ => {}
            }
            client_write.write_all(&buf[..n]).await?;
        }
    };
    // Either direction ending (or being cut) ends the connection.
    let _: std::io::Result<()> = tokio::select! {
        r = upload => r,
        r = download => r,
    };
}
