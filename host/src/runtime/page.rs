//! The status page: the [`Overview`] as one HTML page a person reads at a
//! glance, served at `GET /` on the status address.
//!
//! Rendered on the server, with its style inline and no script, image or
//! other request of its own: it refreshes itself every few seconds with a
//! `<meta>` refresh, and the response forbids scripts outright
//! ([`CONTENT_SECURITY_POLICY`]). Every text a plugin or the cluster chose
//! (names, errors, differences, holders) is escaped.

use std::fmt::Write as _;

use super::overview::{InformerRow, Overview, PluginRow, duration_text};

/// The page reloads itself this often, in seconds.
pub(super) const REFRESH_SECONDS: u32 = 5;

/// What the page may load: its inline style, nothing else.
pub(super) const CONTENT_SECURITY_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const STYLE: &str = "
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; background: #fafbfc; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.6em 0 .4em; }
.meta { color: #5b6474; margin: 0 0 1em; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { border-bottom: 1px solid #e3e6eb; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #eef1f5; font-weight: 600; white-space: nowrap; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
code { font-size: .92em; }
.state { font-weight: 600; white-space: nowrap; }
.ok { color: #137333; } .warn { color: #a56300; } .bad { color: #c5221f; }
.err { color: #c5221f; max-width: 40em; overflow-wrap: anywhere; }
.small { color: #5b6474; font-size: .9em; }
";

/// `text` safe inside HTML text and double-quoted attributes.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The class a state is shown in.
fn state_class(state: &str) -> &'static str {
    match state {
        "Running" => "ok",
        "Failed" | "Quarantined" => "bad",
        _ => "warn",
    }
}

/// A count of what happened per second, or `–` before there is a rate.
fn rate(rate: Option<f64>) -> String {
    match rate {
        None => "–".to_owned(),
        Some(rate) if rate >= 100.0 => format!("{rate:.0}"),
        Some(rate) => format!("{rate:.1}"),
    }
}

/// The response to `GET /`: the page, not to be cached, allowed no script.
pub(super) fn response(overview: &Overview) -> impl axum::response::IntoResponse + use<> {
    use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY as CSP, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CSP, CONTENT_SECURITY_POLICY),
            (CACHE_CONTROL, "no-store"),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        render(overview),
    )
}

/// The page of `overview`.
pub(super) fn render(overview: &Overview) -> String {
    let mut html = String::with_capacity(4096 + overview.plugins.len() * 1024);
    let title = match &overview.replica {
        Some(replica) => format!("kinformer on {}", replica.identity),
        None => "kinformer".to_owned(),
    };
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    summary(&mut html, overview);
    plugins(&mut html, overview);
    informers(&mut html, overview);
    html.push_str("</body></html>\n");
    html
}

fn summary(html: &mut String, overview: &Overview) {
    let count = |wanted: &str| overview.plugins.iter().filter(|row| row.state == wanted).count();
    let _ = write!(
        html,
        "<p class=\"meta\">{} plugins: {} running, {} failed or quarantined; {} informers; \
         taken at {} UTC, refreshed every {REFRESH_SECONDS} s",
        overview.plugins.len(),
        count("Running"),
        count("Failed") + count("Quarantined"),
        overview.informers.len(),
        utc(overview.taken_unix_s),
    );
    if let Some(span) = overview.rate_span_s {
        let _ = write!(html, "; rates over the last {span:.0} s");
    }
    html.push_str("</p>\n");
    if let Some(replica) = &overview.replica {
        let leases = if replica.leases.is_empty() {
            "none".to_owned()
        } else {
            replica
                .leases
                .iter()
                .map(|lease| format!("<code>{}</code>", escape(lease)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            html,
            "<p class=\"meta\">Leader election ({}): replica <code>{}</code> holds {leases}",
            escape(&replica.mode),
            escape(&replica.identity)
        );
        if replica.mode == "per-plugin" {
            let _ = write!(
                html,
                "; {} replicas alive, a share of {} writers each",
                replica.replicas, replica.share
            );
        }
        html.push_str("</p>\n");
    }
}

fn plugins(html: &mut String, overview: &Overview) {
    html.push_str(
        "<h2>Plugins</h2>\n<table id=\"plugins\"><thead><tr><th>Plugin</th><th>State</th><th>Version</th>\
         <th>Deltas</th><th>Deltas/s</th><th>Errors</th><th>Traps</th><th>Restarts</th><th>Queued</th>\
         <th>CPU (used of share)</th><th>Rollout</th><th>Lease</th><th>Last error</th></tr></thead><tbody>\n",
    );
    for row in &overview.plugins {
        plugin_row(html, row);
    }
    if overview.plugins.is_empty() {
        html.push_str("<tr><td colspan=\"13\">No plugins.</td></tr>\n");
    }
    html.push_str("</tbody></table>\n");
}

fn plugin_row(html: &mut String, row: &PluginRow) {
    let version = match (&row.version, &row.digest) {
        (Some(version), Some(digest)) => {
            format!("{}<br><code class=\"small\">{}</code>", escape(version), escape(digest))
        }
        (None, Some(digest)) => format!("<code class=\"small\">{}</code>", escape(digest)),
        (Some(version), None) => escape(version),
        (None, None) => "–".to_owned(),
    };
    let cpu = format!(
        "{}m of {}<br><span class=\"small\">paused {}</span>",
        rate(row.cpu_used_millicores),
        if row.cpu_millicores == 0 {
            "–".to_owned()
        } else {
            format!("{}m", row.cpu_millicores)
        },
        paused(row.cpu_paused_ms)
    );
    let rollout = row.rollout.as_ref().map_or_else(
        || "–".to_owned(),
        |rollout| {
            let share = if rollout.mode == "canary" {
                format!(" {}%", rollout.percent)
            } else {
                String::new()
            };
            let compared = if rollout.compared.is_empty() {
                "nothing compared yet".to_owned()
            } else {
                rollout
                    .compared
                    .iter()
                    .map(|(outcome, count)| format!("{count} {}", escape(outcome)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut cell = format!(
                "{}{share} <code class=\"small\">{}</code><br>{compared}; failures: running {}, next {}",
                escape(&rollout.mode),
                escape(&rollout.next_digest[..12.min(rollout.next_digest.len())]),
                rollout.running_failures,
                rollout.next_failures
            );
            if let Some(reason) = &rollout.rolled_back {
                let _ = write!(cell, "<br><span class=\"bad\">rolled back: {}</span>", escape(reason));
            }
            if let Some(difference) = &rollout.last_difference {
                let _ = write!(cell, "<br><span class=\"small\">last: {}</span>", escape(difference));
            }
            cell
        },
    );
    let lease = row.lease.as_ref().map_or_else(
        || "–".to_owned(),
        |lease| {
            let holder = match (&lease.holder, lease.held_here) {
                (_, true) => "<span class=\"ok\">held here</span>".to_owned(),
                (Some(holder), false) => format!("held by {}", escape(holder)),
                (None, false) => "<span class=\"warn\">free</span>".to_owned(),
            };
            format!("<code class=\"small\">{}</code><br>{holder}", escape(&lease.name))
        },
    );
    let deltas = if row.reconciles == 0 {
        row.deltas.to_string()
    } else {
        format!(
            "{}<br><span class=\"small\">{} reconciles</span>",
            row.deltas, row.reconciles
        )
    };
    let error = row.last_error.as_deref().map_or_else(String::new, |error| {
        format!("<span class=\"err\">{}</span>", escape(error))
    });
    let _ = writeln!(
        html,
        "<tr><td><code>{}</code></td><td class=\"state {}\">{}</td><td>{version}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{cpu}</td><td>{rollout}</td>\
         <td>{lease}</td><td>{error}</td></tr>",
        escape(&row.name),
        state_class(&row.state),
        escape(&row.state),
        deltas,
        rate(row.deltas_per_second),
        row.errors,
        row.traps,
        row.restarts,
        row.queued,
    );
}

fn paused(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        duration_text(ms / 1000)
    }
}

fn informers(html: &mut String, overview: &Overview) {
    html.push_str(
        "<h2>Informers</h2>\n<table id=\"informers\"><thead><tr><th>Resource</th><th>Namespace</th>\
         <th>Selector</th><th>Objects</th><th>Synced</th><th>Lists</th><th>Watch restarts (410 Gone)</th>\
         <th>Last list</th></tr></thead><tbody>\n",
    );
    for row in &overview.informers {
        informer_row(html, row, overview.taken_unix_s);
    }
    if overview.informers.is_empty() {
        html.push_str("<tr><td colspan=\"8\">No informers.</td></tr>\n");
    }
    html.push_str("</tbody></table>\n");
}

fn informer_row(html: &mut String, row: &InformerRow, now_unix_s: u64) {
    let synced = if row.synced {
        "<span class=\"ok\">yes</span>"
    } else {
        "<span class=\"bad\">no</span>"
    };
    let last = row.last_list_unix_s.map_or_else(
        || "never".to_owned(),
        |at| format!("{} ago", duration_text(now_unix_s.saturating_sub(at))),
    );
    let _ = writeln!(
        html,
        "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{synced}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{} ({})</td><td>{last}</td></tr>",
        escape(&row.resource),
        escape(&row.namespace),
        row.selector.as_deref().map_or_else(|| "–".to_owned(), escape),
        row.objects,
        row.lists,
        row.watch_restarts,
        row.gone,
    );
}

/// `2026-11-01 09:30:05`, from seconds since the Unix epoch.
fn utc(unix_s: u64) -> String {
    let days = unix_s / 86_400;
    let seconds = unix_s % 86_400;
    // Howard Hinnant's civil_from_days, for days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        seconds / 3600,
        seconds % 3600 / 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::overview::{LeaseRow, Replica, RolloutRow};

    fn row(name: &str) -> PluginRow {
        PluginRow {
            name: name.to_owned(),
            state: "Running".to_owned(),
            version: Some("0.1.0".to_owned()),
            digest: Some("0123456789ab".to_owned()),
            deltas: 12,
            deltas_per_second: Some(2.5),
            cpu_millicores: 250,
            cpu_used_millicores: Some(12.0),
            ..PluginRow::default()
        }
    }

    #[test]
    fn the_page_escapes_what_plugins_chose_and_loads_nothing() {
        let mut hostile = row("<img src=x onerror=alert(1)>");
        hostile.state = "Failed".to_owned();
        hostile.last_error = Some("unknown field `<script>alert(\"x\")</script>` & more".to_owned());
        hostile.rollout = Some(RolloutRow {
            mode: "shadow".to_owned(),
            next_digest: "fedcba9876543210".to_owned(),
            last_difference: Some("ns/<b>: differs".to_owned()),
            rolled_back: Some("<i>worse</i>".to_owned()),
            ..RolloutRow::default()
        });
        hostile.lease = Some(LeaseRow {
            name: "kinformer/kinformer-x".to_owned(),
            holder: Some("<pod>".to_owned()),
            held_here: false,
        });
        let overview = Overview {
            plugins: vec![hostile],
            ..Overview::default()
        };
        let html = render(&overview);
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"), "{html}");
        assert!(
            html.contains("unknown field `&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;` &amp; more"),
            "{html}"
        );
        assert!(html.contains("rolled back: &lt;i&gt;worse&lt;/i&gt;") && html.contains("held by &lt;pod&gt;"));
        for tag in ["<img", "<script", "<b>", "<i>", "<pod>"] {
            assert!(!html.contains(tag), "{tag} unescaped:\n{html}");
        }
        for loads in ["src=\"", "href=", "url("] {
            assert!(!html.contains(loads), "the page loads something ({loads}):\n{html}");
        }
        assert!(html.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
    }

    #[test]
    fn two_hundred_plugins_make_two_hundred_rows_with_their_rates_and_leases() {
        let plugins: Vec<PluginRow> = (0..200)
            .map(|i| {
                let mut row = row(&format!("plugin-{i:03}"));
                if i == 7 {
                    row.reconciles = 70;
                }
                if i % 50 == 0 {
                    row.lease = Some(LeaseRow {
                        name: format!("kinformer/kinformer-plugin-{i:03}"),
                        holder: Some("pod-a".to_owned()),
                        held_here: true,
                    });
                }
                row
            })
            .collect();
        let overview = Overview {
            taken_unix_s: 1_793_525_405,
            rate_span_s: Some(10.0),
            replica: Some(Replica {
                identity: "pod-a".to_owned(),
                mode: "per-plugin".to_owned(),
                leases: vec!["kinformer/kinformer-plugin-000".to_owned()],
                replicas: 2,
                share: 2,
            }),
            plugins,
            informers: vec![InformerRow {
                resource: "v1/Pod".to_owned(),
                namespace: "(all)".to_owned(),
                objects: 3,
                synced: true,
                lists: 1,
                last_list_unix_s: Some(1_793_525_400),
                ..InformerRow::default()
            }],
        };
        let html = render(&overview);
        let table = html
            .split("<table id=\"plugins\">")
            .nth(1)
            .unwrap()
            .split("</table>")
            .next()
            .unwrap();
        assert_eq!(table.matches("<tr><td>").count(), 200);
        assert!(table.contains("<code>plugin-199</code>"));
        assert_eq!(table.matches("held here").count(), 4);
        assert!(html.contains("200 plugins: 200 running"), "{html}");
        assert!(html.contains("taken at 2026-11-01 09:30:05 UTC"), "{html}");
        assert!(html.contains("<td class=\"n\">2.5</td>") && html.contains("12.0m of 250m"));
        assert!(html.contains("<td>5s ago</td>"), "{html}");
        assert!(html.contains("<td class=\"n\">12<br><span class=\"small\">70 reconciles</span></td>"));
        assert!(html.contains("holds <code>kinformer/kinformer-plugin-000</code>"));
    }

    #[test]
    fn dates_are_civil_dates_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(4_102_444_799), "2099-12-31 23:59:59");
    }
}
