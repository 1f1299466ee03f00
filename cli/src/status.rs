//! `kinformer status`: a running host at a glance, read from its status
//! address (`/overview`, what the status page at `/` shows) and printed as
//! tables for a terminal.

use std::fmt::Write as _;
use std::net::SocketAddr;

use anyhow::Context as _;
use kinformer::runtime::Overview;
use kinformer::runtime::overview::duration_text;

/// The body of `GET path` on the status address `address`.
///
/// # Errors
///
/// When the host cannot be reached, or answers other than 2xx.
pub async fn get(address: SocketAddr, path: &str) -> anyhow::Result<bytes::Bytes> {
    use http_body_util::BodyExt as _;

    let stream = tokio::net::TcpStream::connect(address)
        .await
        .with_context(|| {
            format!(
                "connecting to the status address {address}: is a host running with `kinformer run --status-addr {address}`?"
            )
        })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, address.to_string())
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    anyhow::ensure!(status.is_success(), "{address}{path} answered {status}");
    Ok(body)
}

/// The overview of the host at `address`. The host takes rates between two
/// overviews at least a second apart: when it has none yet, this asks again
/// a second later.
///
/// # Errors
///
/// When the host cannot be reached or does not answer an overview.
pub async fn fetch(address: SocketAddr) -> anyhow::Result<Overview> {
    let read = async || -> anyhow::Result<Overview> {
        let body = get(address, "/overview").await?;
        serde_json::from_slice(&body).with_context(|| format!("{address}/overview did not answer an overview"))
    };
    let overview = read().await?;
    if overview.rate_span_s.is_some() || overview.plugins.is_empty() {
        return Ok(overview);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    read().await
}

/// Columns as wide as their widest cell, separated by two spaces.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|title| title.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header: Vec<String> = header.iter().map(|title| (*title).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let _ = write!(line, "{cell:<width$}");
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".to_owned(), |rate| format!("{rate:.1}"))
}

/// Cut to `max` characters, marked with `…`.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `overview` as a person reads it in a terminal: a line on leader
/// election, a table of plugins, the rollouts, a table of informers.
#[must_use]
pub fn render(overview: &Overview) -> String {
    let mut text = String::new();
    if let Some(replica) = &overview.replica {
        let leases = if replica.leases.is_empty() {
            "no Lease".to_owned()
        } else {
            replica.leases.join(", ")
        };
        let _ = writeln!(
            text,
            "replica {} ({} leader election) holds {leases}\n",
            replica.identity, replica.mode
        );
    }
    let plugins: Vec<Vec<String>> = overview
        .plugins
        .iter()
        .map(|row| {
            let lease = row.lease.as_ref().map_or_else(
                || "-".to_owned(),
                |lease| match (&lease.holder, lease.held_here) {
                    (_, true) => "held here".to_owned(),
                    (Some(holder), false) => format!("held by {holder}"),
                    (None, false) => "free".to_owned(),
                },
            );
            let cpu = if row.cpu_millicores == 0 {
                "-".to_owned()
            } else {
                format!("{}m/{}m", rate(row.cpu_used_millicores), row.cpu_millicores)
            };
            vec![
                row.name.clone(),
                row.state.clone(),
                row.version.clone().unwrap_or_else(|| "-".to_owned()),
                row.digest.clone().unwrap_or_else(|| "-".to_owned()),
                if row.reconciles == 0 {
                    row.deltas.to_string()
                } else {
                    format!("{} ({} reconciles)", row.deltas, row.reconciles)
                },
                rate(row.deltas_per_second),
                row.errors.to_string(),
                row.traps.to_string(),
                row.queued.to_string(),
                cpu,
                lease,
                cut(row.last_error.as_deref().unwrap_or(""), 80),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "PLUGIN",
            "STATE",
            "VERSION",
            "DIGEST",
            "DELTAS",
            "DELTAS/S",
            "ERRORS",
            "TRAPS",
            "QUEUED",
            "CPU",
            "LEASE",
            "LAST ERROR",
        ],
        &plugins,
    ));
    for row in &overview.plugins {
        let Some(rollout) = &row.rollout else { continue };
        let compared: Vec<String> = rollout
            .compared
            .iter()
            .map(|(outcome, count)| format!("{count} {outcome}"))
            .collect();
        let _ = writeln!(
            text,
            "\n{}: {} {}{}: compared {}; failures running {}, next {}",
            row.name,
            rollout.mode,
            rollout.next_digest.chars().take(12).collect::<String>(),
            if rollout.mode == "canary" {
                format!(" at {}%", rollout.percent)
            } else {
                String::new()
            },
            if compared.is_empty() {
                "nothing".to_owned()
            } else {
                compared.join(", ")
            },
            rollout.running_failures,
            rollout.next_failures
        );
        if let Some(reason) = &rollout.rolled_back {
            let _ = writeln!(text, "  ROLLED BACK: {reason}");
        }
        if let Some(difference) = &rollout.last_difference {
            let _ = writeln!(text, "  last difference: {difference}");
        }
    }
    let informers: Vec<Vec<String>> = overview
        .informers
        .iter()
        .map(|row| {
            vec![
                row.resource.clone(),
                row.namespace.clone(),
                row.selector.clone().unwrap_or_else(|| "-".to_owned()),
                row.objects.to_string(),
                if row.synced { "yes" } else { "no" }.to_owned(),
                row.lists.to_string(),
                format!("{} ({} gone)", row.watch_restarts, row.gone),
                row.last_list_unix_s.map_or_else(
                    || "never".to_owned(),
                    |at| format!("{} ago", duration_text(overview.taken_unix_s.saturating_sub(at))),
                ),
            ]
        })
        .collect();
    text.push('\n');
    text.push_str(&table(
        &[
            "RESOURCE",
            "NAMESPACE",
            "SELECTOR",
            "OBJECTS",
            "SYNCED",
            "LISTS",
            "WATCH RESTARTS",
            "LAST LIST",
        ],
        &informers,
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_line_up_and_say_what_the_page_says() {
        // As the host serves it at /overview.
        let overview: Overview = serde_json::from_value(serde_json::json!({
            "takenUnixS": 1000,
            "rateSpanS": 10.0,
            "replica": null,
            "plugins": [
                {"name": "broken", "state": "Failed", "version": null, "digest": null, "deltas": 0,
                 "deltasPerSecond": null, "errors": 0, "traps": 0, "restarts": 0, "queued": 0,
                 "lastError": "broken.toml: unknown field `x`", "cpuMillicores": 0,
                 "cpuUsedMillicores": null, "cpuPausedMs": 0, "rollout": null, "lease": null},
                {"name": "hpa", "state": "Running", "version": "0.2.0", "digest": "0123456789ab",
                 "deltas": 1200, "deltasPerSecond": 12.5, "errors": 0, "traps": 0, "restarts": 0,
                 "queued": 0, "lastError": null, "cpuMillicores": 250, "cpuUsedMillicores": 3.0,
                 "cpuPausedMs": 0,
                 "rollout": {"mode": "shadow", "percent": 0, "nextDigest": "fedcba9876543210",
                             "compared": {"same": 10, "differs": 2}, "liveFailures": 0,
                             "nextFailures": 0, "lastDifference": null,
                             "rolledBack": "errors 5 over 1"},
                 "lease": {"name": "kinformer/kinformer-hpa", "holder": "pod-b", "heldHere": false}}
            ],
            "informers": [
                {"resource": "v1/Pod", "namespace": "(all)", "selector": null, "objects": 12,
                 "synced": true, "lists": 2, "watchRestarts": 1, "gone": 1, "lastListUnixS": 995}
            ]
        }))
        .unwrap();
        let text = render(&overview);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "PLUGIN  STATE    VERSION  DIGEST        DELTAS  DELTAS/S  ERRORS  TRAPS  QUEUED  CPU        LEASE          LAST ERROR"
        );
        assert_eq!(
            lines[1],
            "broken  Failed   -        -             0       -         0       0      0       -          -              broken.toml: unknown field `x`"
        );
        assert_eq!(
            lines[2],
            "hpa     Running  0.2.0    0123456789ab  1200    12.5      0       0      0       3.0m/250m  held by pod-b"
        );
        assert!(
            text.contains(
                "hpa: shadow fedcba987654: compared 2 differs, 10 same; failures running 0, next 0\n  ROLLED BACK: errors 5 over 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("v1/Pod    (all)      -         12       yes     2      1 (1 gone)      5s ago"),
            "{text}"
        );
    }
}
