//! The agent's listener: each connection is served plain or with TLS as the newest cluster
//! configuration the member read says (`agentTls`, from `spec.backup.tls`). The TLS
//! configuration is built from the files when the connection comes, so a rotated certificate
//! counts from the next connection on, and every request carries whether its connection
//! presented a client certificate the CA verified ([`VerifiedClient`]), for `http.rs` to
//! decide on.

use std::sync::Arc;

use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use quorate_coord::agent_tls::{self, VerifiedClient};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::state::SharedState;

/// Path label under which failed TLS handshakes are counted as refused requests.
pub const TLS_HANDSHAKE: &str = "(tls handshake)";

/// Serves `app` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    state: SharedState,
    mut shutdown: watch::Receiver<bool>,
) {
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
        let (app, state) = (app.clone(), state.clone());
        tokio::spawn(async move {
            let Some(files) = tls else {
                return serve_connection(TokioIo::new(stream), app, VerifiedClient(false)).await;
            };
            let config = match agent_tls::server_config(&files) {
                Ok(config) => config,
                Err(e) => {
                    tracing::warn!(error = %e, "the agent's TLS files cannot be used; connection closed");
                    return;
                }
            };
            match TlsAcceptor::from(Arc::new(config)).accept(stream).await {
                Ok(tls) => {
                    let verified = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .is_some_and(|c| !c.is_empty());
                    serve_connection(TokioIo::new(tls), app, VerifiedClient(verified)).await;
                }
                Err(e) => {
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
