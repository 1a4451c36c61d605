//! The agent's listener: each connection is served plain or with TLS as the newest cluster
//! configuration the member read says (`agentTls`, from `spec.backup.tls`). The TLS
//! configuration is built from the files and kept while their sizes and modification times stay
//! the same, so a rotated certificate counts from the next connection on without every
//! connection reading and parsing them; a handshake has [`TLS_HANDSHAKE_TIMEOUT`] to finish.
//! Every request carries whether its connection
//! presented a client certificate the CA verified ([`VerifiedClient`]), for `http.rs` to
//! decide on.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use quorate_coord::agent_tls::{self, AgentTlsError, VerifiedClient};
use quorate_core::cluster_config::TlsFiles;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::state::SharedState;

/// Path label under which failed TLS handshakes are counted as refused requests.
pub const TLS_HANDSHAKE: &str = "(tls handshake)";

/// How long a client has to finish the TLS handshake; a connection that stalls is closed and
/// counted as refused.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What identifies the files' content without reading them: each file's size and time.
type FilesStamp = (TlsFiles, [Option<(u64, SystemTime)>; 3]);

/// The server configuration of the files last used, and what they were.
#[derive(Default)]
struct ConfigCache(Mutex<Option<(FilesStamp, Arc<ServerConfig>)>>);

impl ConfigCache {
    /// The configuration for `files`, built again only when one of them changed.
    fn get(&self, files: &TlsFiles) -> Result<Arc<ServerConfig>, AgentTlsError> {
        let stat = |path: &str| {
            std::fs::metadata(path)
                .ok()
                .and_then(|m| Some((m.len(), m.modified().ok()?)))
        };
        let stamp = (
            files.clone(),
            [
                stat(&files.ca_file),
                stat(&files.cert_file),
                stat(&files.key_file),
            ],
        );
        let mut cached = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, config)) = cached.as_ref()
            && *at == stamp
        {
            return Ok(config.clone());
        }
        let config = Arc::new(agent_tls::server_config(files)?);
        *cached = Some((stamp, config.clone()));
        Ok(config)
    }
}

/// Serves `app` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    state: SharedState,
    shutdown: watch::Receiver<bool>,
) {
    serve_with(listener, app, state, shutdown, TLS_HANDSHAKE_TIMEOUT).await
}

/// [`serve`] with the time a TLS handshake may take (tests make it short).
async fn serve_with(
    listener: TcpListener,
    app: Router,
    state: SharedState,
    mut shutdown: watch::Receiver<bool>,
    handshake_timeout: Duration,
) {
    let configs = Arc::new(ConfigCache::default());
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    continue;
                }
            },
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let tls = state.get().agent_tls;
        let (app, state, configs) = (app.clone(), state.clone(), configs.clone());
        tokio::spawn(async move {
            let Some(files) = tls else {
                return serve_connection(TokioIo::new(stream), app, VerifiedClient(false)).await;
            };
            let config = match configs.get(&files) {
                Ok(config) => config,
                Err(e) => {
                    tracing::warn!(error = %e, "the agent's TLS files cannot be used; connection closed");
                    return;
                }
            };
            let handshake = TlsAcceptor::from(config).accept(stream);
            match tokio::time::timeout(handshake_timeout, handshake).await {
                Err(_) => {
                    state.metrics().refused(TLS_HANDSHAKE);
                    tracing::debug!(
                        "TLS handshake not finished within {handshake_timeout:?}; connection closed"
                    );
                }
                Ok(Ok(tls)) => {
                    let verified = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .is_some_and(|c| !c.is_empty());
                    serve_connection(TokioIo::new(tls), app, VerifiedClient(verified)).await;
                }
                Ok(Err(e)) => {
                    state.metrics().refused(TLS_HANDSHAKE);
                    tracing::debug!(error = %e, "TLS handshake refused");
                }
            }
        });
    }
}

async fn serve_connection<I>(io: TokioIo<I>, app: Router, verified: VerifiedClient)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app.layer(Extension(verified)));
    if let Err(e) = auto::Builder::new(TokioExecutor::new())
        .serve_connection_with_upgrades(io, service)
        .await
    {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::AsyncReadExt;

    /// A client that opens a TCP connection to the TLS listener and sends nothing is closed by
    /// the agent once the handshake timeout passed (not before), and counted as refused.
    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_at_the_handshake_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let certs = quorate_testkit::tls::TestCerts::generate(dir.path()).unwrap();
        let state = SharedState::default();
        state.update(|s| {
            s.agent_tls = Some(TlsFiles {
                ca_file: certs.ca.display().to_string(),
                cert_file: certs.server_cert.display().to_string(),
                key_file: certs.server_key.display().to_string(),
                client_cert_file: None,
                client_key_file: None,
                trusted_ca_digest: None,
            })
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, shutdown) = watch::channel(false);
        let timeout = Duration::from_millis(300);
        let server = tokio::spawn(serve_with(
            listener,
            Router::new(),
            state.clone(),
            shutdown,
            timeout,
        ));
        let started = Instant::now();
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 64];
        // The agent closes the connection: end of stream (or a reset), without a byte sent.
        let read = tokio::time::timeout(Duration::from_secs(30), silent.read(&mut buf))
            .await
            .expect("the agent closed the silent connection");
        let elapsed = started.elapsed();
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(
            elapsed >= timeout,
            "closed after {elapsed:?}, before the timeout"
        );
        assert!(
            elapsed < TLS_HANDSHAKE_TIMEOUT,
            "closed after {elapsed:?}: the injected timeout was not used"
        );
        let metrics = state.metrics().encode();
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("quorate_agent_requests_refused_total")
                    && l.contains(TLS_HANDSHAKE)
                    && l.ends_with(" 1")),
            "{metrics}"
        );
        stop.send(true).unwrap();
        server.await.unwrap();
    }
}
