//! The `kinformer` command's library: the demo on the embedded API emulation,
//! the serve loop, what `kinformer check` prints, the RBAC `kinformer rbac`
//! prints, `record` and `replay`, the tables `kinformer status` prints, and
//! the projects `kinformer new` writes, apart from argument parsing so that
//! tests use them directly.

pub mod check;
#[cfg(feature = "emulation")]
pub mod demo;
pub mod rbac;
pub mod recording;
pub mod replay;
pub mod rollout;
pub mod scaffold;
pub mod status;

use std::collections::HashMap;
use std::time::Duration;

use kinformer::runtime::Runtime;

/// Serves until `end` completes (a [`stop_signal`], a sleep), logging each
/// plugin's progress every 30 seconds when it changed. Waits first for the
/// plugins' loads of a runtime from [`Runtime::launch`], and stops at `end`
/// even while one compiles.
pub async fn serve(runtime: &Runtime, end: impl std::future::Future<Output = ()>) {
    tokio::pin!(end);
    tokio::select! {
        () = runtime.rescan() => {}
        () = &mut end => {
            tracing::info!("stopping");
            return;
        }
    }
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
/// pod it stops. The handlers are installed at the call, so a signal that
/// comes before the future is first awaited is not lost.
pub fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        async move {
            match (interrupt, terminate) {
                (Some(mut interrupt), Some(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
