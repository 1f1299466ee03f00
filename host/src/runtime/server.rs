//! The status address: the plugins' status, who leads, the Prometheus
//! metrics and the probes, served over HTTP by axum.

use std::sync::{Arc, Weak};

use super::supervisor::Supervisor;
use crate::leader::Leadership;

/// Serves, until `stopped` turns true and while the runtime lives:
///
/// - `GET /plugins`: every plugin's status (without the log lines), a JSON array;
/// - `GET /leader`: who leads (`null` without leader election);
/// - `GET /metrics`: the Prometheus metrics ([`super::metrics`]);
/// - `GET /healthz`: 200 while the plugins' workers and the informers run;
/// - `GET /readyz`: 503 until the directory was loaded (each plugin running,
///   failed or standing by) and every informer synced, then 200;
/// - `GET /`: the status page ([`super::page`]), and `GET /overview`: the
///   same as JSON ([`super::overview`]).
///
/// Returns the address bound.
pub(super) async fn serve(
    address: std::net::SocketAddr,
    supervisor: Weak<Supervisor>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<std::net::SocketAddr> {
    use axum::http::{StatusCode, header::CONTENT_TYPE};
    use axum::routing::get;

    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let json = |body: String| ([(CONTENT_TYPE, "application/json")], body);
    let probe = |ok: bool| {
        if ok {
            (StatusCode::OK, "ok\n")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
        }
    };
    let registry = Arc::new(super::metrics::registry(supervisor.clone()));
    let overview = super::overview::source(supervisor.clone());
    let app = axum::Router::new()
        .route(
            "/",
            get({
                let overview = overview.clone();
                move || async move { super::page::response(&overview()) }
            }),
        )
        .route(
            "/overview",
            get(move || async move { json(serde_json::to_string(&overview()).unwrap_or_else(|_| "{}".to_owned())) }),
        )
        .route(
            "/plugins",
            get({
                let supervisor = supervisor.clone();
                move || async move {
                    let plugins = supervisor.upgrade().map(|r| r.status()).unwrap_or_default();
                    json(serde_json::to_string(&plugins).unwrap_or_else(|_| "[]".to_owned()))
                }
            }),
        )
        .route(
            "/leader",
            get({
                let supervisor = supervisor.clone();
                move || async move {
                    let leader = supervisor
                        .upgrade()
                        .and_then(|r| r.election.as_ref().map(Leadership::status));
                    json(serde_json::to_string(&leader).unwrap_or_else(|_| "null".to_owned()))
                }
            }),
        )
        .route(
            "/metrics",
            get(move || async move {
                (
                    [(
                        CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    super::metrics::render(&registry),
                )
            }),
        )
        .route(
            "/healthz",
            get({
                let supervisor = supervisor.clone();
                move || async move { probe(supervisor.upgrade().is_some_and(|r| r.healthy())) }
            }),
        )
        .route(
            "/readyz",
            get(move || async move { probe(supervisor.upgrade().is_some_and(|r| r.ready())) }),
        );
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::warn!(%error, "status endpoint stopped");
        }
    });
    tracing::info!(address = %bound, "plugin status at http://{bound}/plugins, metrics at /metrics");
    Ok(bound)
}
