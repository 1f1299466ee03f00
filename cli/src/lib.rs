//! The `kinformer` command's library: the demo on the embedded API emulation,
//! the serve loop, what `kinformer check` prints, `record` and `replay`, and
//! the projects `kinformer new` writes, apart from argument parsing so that
//! tests use them directly.

pub mod check;
pub mod demo;
pub mod recording;
pub mod replay;
pub mod scaffold;

use std::time::Duration;

use kinformer::runtime::Runtime;

/// Serves until `duration` passes (or Ctrl-C when `None`), logging each
/// plugin's progress every 30 seconds.
pub async fn serve(runtime: &Runtime, duration: Option<Duration>) {
    let end = async {
        match duration {
            Some(duration) => tokio::time::sleep(duration).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(end);
    let mut report = tokio::time::interval(Duration::from_secs(30));
    report.tick().await;
    loop {
        tokio::select! {
            () = &mut end => break,
            _ = report.tick() => {
                for status in runtime.status() {
                    tracing::info!(
                        plugin = %status.name,
                        state = ?status.state,
                        deltas = status.deltas,
                        errors = status.errors,
                        restarts = status.restarts,
                        reloads = status.reloads,
                        "plugin progress"
                    );
                }
            }
        }
    }
    tracing::info!("stopping");
}
