//! `kinformer rollout status`: a running host's view of a plugin's next
//! version, read from its status address and put in a few lines a person
//! reads at a glance.

use std::fmt::Write as _;
use std::net::SocketAddr;

use anyhow::Context as _;
use serde_json::Value;

/// The plugins' status as the host at `address` serves it (`/plugins`).
///
/// # Errors
///
/// When the host cannot be reached or does not answer JSON.
pub async fn fetch(address: SocketAddr) -> anyhow::Result<Value> {
    let body = crate::status::get(address, "/plugins").await?;
    serde_json::from_slice(&body).with_context(|| format!("{address}/plugins did not answer the plugins' status"))
}

/// The summary of plugin `name`'s rollout, from the plugins' status
/// `plugins` as of `now_unix_s`.
///
/// # Errors
///
/// When no plugin of that name runs.
pub fn summary(plugins: &Value, name: &str, now_unix_s: u64) -> anyhow::Result<String> {
    let find = |wanted: &str| {
        plugins
            .as_array()
            .and_then(|plugins| plugins.iter().find(|plugin| plugin["name"] == wanted))
    };
    let plugin = find(name).with_context(|| format!("no plugin {name} runs on this host"))?;
    let next_name = format!("{name}{}", kinformer::rollout::NEXT_SUFFIX);
    let mut text = String::new();
    let Some(report) = plugin.get("rollout").filter(|report| !report.is_null()) else {
        match find(&next_name) {
            Some(next) => {
                let _ = writeln!(
                    text,
                    "{name}: its next version {next_name} is {} ({})",
                    str_of(&next["state"]),
                    next["load_error"]
                        .as_str()
                        .unwrap_or("not yet beside the running version")
                );
            }
            None => {
                let _ = writeln!(
                    text,
                    "{name}: no next version (place {next_name}.wasm, and its manifest {next_name}.toml, beside {name}.wasm)"
                );
            }
        }
        return Ok(text);
    };
    let count = |value: &Value| value.as_u64().unwrap_or(0);
    let since = now_unix_s.saturating_sub(count(&report["since_unix_s"]));
    let mode = str_of(&report["mode"]);
    let share = if mode == "canary" {
        format!(" owning {}% of the keys", count(&report["percent"]))
    } else {
        String::new()
    };
    let _ = writeln!(
        text,
        "{name}: {mode} {}{share}, for {}",
        str_of(&report["next_digest"]),
        kinformer::runtime::overview::duration_text(since)
    );
    if let Some(reason) = report["rolled_back"].as_str() {
        let _ = writeln!(text, "  ROLLED BACK: {reason}");
    }
    let compared = &report["compared"];
    let outcome = |name: &str| count(&compared[name]);
    let total: u64 = ["same", "differs", "only-live", "only-shadow"]
        .iter()
        .map(|name| outcome(name))
        .sum();
    if mode == "shadow" {
        let _ = writeln!(
            text,
            "  compared {total}: {} same, {} differ, {} only live, {} only shadow; {} skipped (shadow behind)",
            outcome("same"),
            outcome("differs"),
            outcome("only-live"),
            outcome("only-shadow"),
            count(&report["skipped"])
        );
    }
    for (label, counts) in [("running", &report["live"]), ("next   ", &report["next"])] {
        let _ = writeln!(
            text,
            "  {label}: {} calls, {} errors, {} traps, {} refused writes",
            count(&counts["calls"]),
            count(&counts["errors"]),
            count(&counts["traps"]),
            count(&counts["refusals"])
        );
    }
    let differences = report["differences"].as_array().cloned().unwrap_or_default();
    if !differences.is_empty() {
        let _ = writeln!(text, "  last differences:");
        for difference in differences.iter().rev().take(5) {
            for each in difference["differences"].as_array().into_iter().flatten() {
                let diff = each["diff"]
                    .as_str()
                    .map(|diff| format!(": {diff}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    text,
                    "    {} {} {}{diff}",
                    str_of(&difference["key"]),
                    str_of(&each["outcome"]),
                    str_of(&each["target"])
                );
            }
        }
    }
    Ok(text)
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_shadow_summary_says_what_was_compared_and_the_last_differences() {
        let plugins = json!([{"name": "hpa", "rollout": {
            "mode": "shadow", "percent": 0, "next_digest": "0123456789ab", "since_unix_s": 1000,
            "compared": {"same": 10, "differs": 2}, "skipped": 1,
            "live": {"calls": 13, "errors": 0, "traps": 0, "refusals": 0},
            "next": {"calls": 12, "errors": 1, "traps": 0, "refusals": 0},
            "differences": [{"key": "ns/app", "differences": [
                {"target": "patch apps/v1/Deployment/scale ns/app", "outcome": "differs", "diff": "spec.replicas: 4 → 2"}]}],
            "rolled_back": null}}]);
        let text = summary(&plugins, "hpa", 1185).unwrap();
        assert_eq!(
            text,
            "hpa: shadow 0123456789ab, for 3m05s\n  \
             compared 12: 10 same, 2 differ, 0 only live, 0 only shadow; 1 skipped (shadow behind)\n  \
             running: 13 calls, 0 errors, 0 traps, 0 refused writes\n  \
             next   : 12 calls, 1 errors, 0 traps, 0 refused writes\n  \
             last differences:\n    \
             ns/app differs patch apps/v1/Deployment/scale ns/app: spec.replicas: 4 → 2\n"
        );
    }

    #[test]
    fn without_a_rollout_the_summary_says_how_to_start_one_and_an_unknown_plugin_is_an_error() {
        let plugins = json!([{"name": "hpa"}]);
        assert!(summary(&plugins, "hpa", 0).unwrap().contains("place hpa.next.wasm"));
        let failed = json!([{"name": "hpa"}, {"name": "hpa.next", "state": "failed", "load_error": "bad"}]);
        assert_eq!(
            summary(&failed, "hpa", 0).unwrap(),
            "hpa: its next version hpa.next is failed (bad)\n"
        );
        assert!(summary(&plugins, "other", 0).is_err());
    }
}
