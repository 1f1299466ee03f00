//! The `kinformer` command's library: the demo on the embedded API emulation,
//! the serve loop, what `kinformer check` prints, the RBAC `kinformer rbac`
//! prints, `record` and `replay`, and the projects `kinformer new` writes,
//! apart from argument parsing so that tests use them directly.

pub mod check;
#[cfg(feature = "emulation")]
pub mod demo;
pub mod rbac;
pub mod recording;
pub mod replay;
pub mod rollout;
pub mod scaffold;

use std::collections::HashMap;
use std::time::Duration;

use kinformer::runtime::Runtime;

/// Serves until `duration` passes (or Ctrl-C or SIGTERM when `None`),
/// logging each plugin's progress every 30 seconds when it changed.
pub async fn serve(runtime: &Runtime, duration: Option<Duration>) {
    let end = async {
        match duration {
            Some(duration) => tokio::time::sleep(duration).await,
            None => stop_signal().await,
        }
    };
    tokio::pin!(end);
    let mut report = tokio::time::interval(Duration::from_secs(30));
    report.tick().await;
    let mut last = HashMap::new();
    loop {
        tokio::select! {
            () = &mut end => break,
            _ = report.tick() => {
                for status in runtime.status() {
                    let progress = (status.state, status.deltas, status.outside_grant, status.errors, status.restarts, status.reloads);
                    if last.get(&status.name) == Some(&progress) {
                        continue;
                    }
                    tracing::info!(
                        plugin = %status.name,
                        state = ?status.state,
                        deltas = status.deltas,
                        outside_grant = status.outside_grant,
                        errors = status.errors,
                        restarts = status.restarts,
                        reloads = status.reloads,
                        "plugin progress"
                    );
                    last.insert(status.name, progress);
                }
            }
        }
    }
    tracing::info!("stopping");
}

/// Waits for Ctrl-C (SIGINT) or, on Unix, SIGTERM: what Kubernetes sends a
/// pod it stops.
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
