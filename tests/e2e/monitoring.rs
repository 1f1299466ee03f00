//! The Grafana dashboard and the Prometheus alerts of `deploy/monitoring/`
//! name only metrics and labels that a live host's `/metrics` has: no panel
//! that stays empty, no alert that can never fire. The host runs every kind
//! of plugin the metrics describe: one handling deltas, one writing, a
//! controller with a shadow beside it, one making HTTP requests, under
//! leader election with a Lease per writing plugin.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use apiserver_sim::workload::Workload;
use kinformer::leader::LeaderElectionConfig;
use kinformer::runtime::{PluginState, Runtime, RuntimeConfig};
use kinformer_tests::runtime::{FLOOD_MANIFEST, cluster, http_get, install, plugin_status, until};

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring")
}

/// Labels Prometheus adds to every series it scrapes: not in `/metrics`.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// Each series family of a Prometheus text exposition, with the label
/// names its series carry.
fn exposition(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut families: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|line| !line.starts_with('#') && !line.is_empty()) {
        let end = line.find(['{', ' ']).unwrap();
        let labels = families.entry(line[..end].to_owned()).or_default();
        let Some(rest) = line[end..].strip_prefix('{') else {
            continue;
        };
        // name="value",... with \" and \\ escaped in values.
        let mut chars = rest.chars();
        loop {
            let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
            let name = name.trim_start_matches(',');
            if name.is_empty() || name.starts_with('}') {
                break;
            }
            labels.insert(name.to_owned());
            assert_eq!(chars.next(), Some('"'), "{line}");
            let mut escaped = false;
            for c in chars.by_ref() {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => break,
                    _ => escaped = false,
                }
            }
        }
    }
    families
}

/// What a PromQL expression names: metrics, with the labels matched on each,
/// and the labels it groups or joins by.
#[derive(Debug, Default)]
struct Names {
    metrics: BTreeMap<String, BTreeSet<String>>,
    grouping: BTreeSet<String>,
}

const AGGREGATIONS: [&str; 13] = [
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "limitk",
];
const GROUPING: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
const OPERATORS: [&str; 6] = ["and", "or", "unless", "bool", "offset", "atan2"];

/// The names in `expr`, by a small PromQL lexer: strings, ranges and
/// template variables are skipped; an identifier followed by `(` is a
/// function; inside `{…}` and after `by`, `on`, … identifiers are labels.
fn names(expr: &str) -> Names {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Names::default();
    let mut i = 0;
    let mut selector: Option<String> = None;
    let mut in_braces = false;
    let mut label_list = (false, false);
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '[' => {
                while i < chars.len() && chars[i] != ']' {
                    i += 1;
                }
                i += 1;
            }
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    while i < chars.len() && chars[i] != '}' {
                        i += 1;
                    }
                    i += 1;
                } else {
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            '{' => {
                in_braces = true;
                i += 1;
            }
            '}' => {
                in_braces = false;
                selector = None;
                i += 1;
            }
            '(' => {
                if label_list.0 {
                    label_list = (false, true);
                }
                i += 1;
            }
            ')' => {
                label_list.1 = false;
                i += 1;
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) => {
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                if in_braces {
                    match &selector {
                        Some(metric) => {
                            names.metrics.get_mut(metric).unwrap().insert(word);
                        }
                        None => panic!("a selector without a metric name in {expr:?}"),
                    }
                } else if label_list.1 {
                    names.grouping.insert(word);
                } else if GROUPING.contains(&word.as_str()) {
                    label_list = (true, false);
                } else if AGGREGATIONS.contains(&word.as_str())
                    || OPERATORS.contains(&word.as_str())
                    || next == Some(&'(')
                {
                } else {
                    names.metrics.entry(word.clone()).or_default();
                    selector = (next == Some(&'{')).then_some(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// The label names a template (`{{plugin}}`, `{{ $labels.plugin }}`) uses.
fn template_labels(template: &str) -> BTreeSet<String> {
    template
        .split("{{")
        .skip(1)
        .filter_map(|part| part.split_once("}}"))
        .map(|(name, _)| name.trim().trim_start_matches("$labels.").to_owned())
        .collect()
}

/// One query of the dashboard or the rules: where it is, its expression, and
/// the labels its legend or annotations show.
#[derive(Debug)]
struct Query {
    place: String,
    expr: String,
    shown: BTreeSet<String>,
}

fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<Query> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(Query {
                place: format!("panel {:?}", panel["title"].as_str().unwrap()),
                expr: target["expr"].as_str().unwrap().to_owned(),
                shown: template_labels(target["legendFormat"].as_str().unwrap_or("")),
            });
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        let Some(definition) = variable["definition"].as_str() else {
            continue;
        };
        // label_values(metric, label)
        let inner = definition
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap();
        let (metric, label) = inner.split_once(',').unwrap();
        queries.push(Query {
            place: format!("variable {:?}", variable["name"].as_str().unwrap()),
            expr: metric.trim().to_owned(),
            shown: [label.trim().to_owned()].into(),
        });
    }
    queries
}

fn rule_queries(rule: &serde_yaml::Value) -> Vec<Query> {
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(rule["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    let mut queries = Vec::new();
    for group in rule["spec"]["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let alert = rule["alert"].as_str().unwrap();
            let shown = rule["annotations"]
                .as_mapping()
                .unwrap()
                .values()
                .flat_map(|text| template_labels(text.as_str().unwrap()))
                .collect();
            queries.push(Query {
                place: format!("alert {alert}"),
                expr: rule["expr"].as_str().unwrap().to_owned(),
                shown,
            });
        }
    }
    queries
}

/// What `queries` name that `families` lacks, one line each.
fn missing(queries: &[Query], families: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut missing = Vec::new();
    for query in queries {
        let names = names(&query.expr);
        assert!(
            !names.metrics.is_empty(),
            "{}: no metric in {:?}",
            query.place,
            query.expr
        );
        let mut available: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
        for (metric, matched) in &names.metrics {
            let Some(labels) = families.get(metric) else {
                missing.push(format!("{}: no metric {metric}", query.place));
                continue;
            };
            available.extend(labels.iter().map(String::as_str));
            for label in matched.iter().filter(|label| !labels.contains(*label)) {
                missing.push(format!("{}: {metric} has no label {label}", query.place));
            }
        }
        for label in names.grouping.iter().chain(&query.shown) {
            if !available.contains(label.as_str()) {
                missing.push(format!(
                    "{}: no metric of {:?} has a label {label}",
                    query.place, query.expr
                ));
            }
        }
    }
    missing
}

#[test]
fn the_lexer_tells_metrics_from_functions_labels_and_ranges() {
    let names = names(
        "histogram_quantile(0.99, sum by (plugin, le) (rate(a_bucket{plugin=~\"$plugin\", x!=\"}\"}[$__rate_interval]))) \
         > 2 * sum without (y) (b offset 10m) and on(z) time() - c",
    );
    let metrics: Vec<&str> = names.metrics.keys().map(String::as_str).collect();
    assert_eq!(metrics, ["a_bucket", "b", "c"]);
    assert_eq!(names.metrics["a_bucket"], ["plugin".to_owned(), "x".to_owned()].into());
    assert_eq!(names.grouping, ["le", "plugin", "y", "z"].map(str::to_owned).into());
    assert_eq!(
        template_labels("{{plugin}} on {{ $labels.instance }}"),
        ["instance", "plugin"].map(str::to_owned).into()
    );
    let families = exposition("# TYPE a counter\na_bucket{plugin=\"p\\\"{\",le=\"1\"} 3\nb 1\nc{z=\"a,b=c\"} 2\n");
    assert_eq!(families["a_bucket"], ["le", "plugin"].map(str::to_owned).into());
    assert_eq!(families["c"], ["z"].map(str::to_owned).into());
    let query = |expr: &str| Query {
        place: "test".into(),
        expr: expr.into(),
        shown: BTreeSet::new(),
    };
    assert!(missing(&[query("sum by (plugin) (a_bucket)")], &families).is_empty());
    assert_eq!(
        missing(&[query("sum by (nope) (a_bucket{le=\"1\", y=\"\"}) + d")], &families),
        [
            "test: a_bucket has no label y",
            "test: no metric d",
            "test: no metric of \"sum by (nope) (a_bucket{le=\\\"1\\\", y=\\\"\\\"}) + d\" has a label nope"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_name_only_metrics_and_labels_a_live_host_serves() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(monitoring().join("kinformer-dashboard.json")).unwrap()).unwrap();
    let rule: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(monitoring().join("prometheusrule.yaml")).unwrap()).unwrap();
    let dashboard_queries = dashboard_queries(&dashboard);
    let rule_queries = rule_queries(&rule);

    // What the dashboard and the alerts must cover.
    let alerts: BTreeSet<&str> = rule_queries
        .iter()
        .map(|query| query.place.trim_start_matches("alert "))
        .collect();
    assert_eq!(
        alerts,
        [
            "KinformerHttpDenialsRising",
            "KinformerInformerNotSynced",
            "KinformerLeaseLost",
            "KinformerPluginFailed",
            "KinformerPluginQuarantined",
            "KinformerRolloutRolledBack",
            "KinformerWritesRefused",
        ]
        .into()
    );
    let charted: BTreeSet<String> = dashboard_queries
        .iter()
        .flat_map(|query| names(&query.expr).metrics.into_keys())
        .collect();
    for metric in [
        "kinformer_plugin_deltas_total",
        "kinformer_plugin_errors_total",
        "kinformer_plugin_traps_total",
        "kinformer_plugin_state",
        "kinformer_plugin_queued_deltas",
        "kinformer_plugin_handle_duration_seconds_bucket",
        "kinformer_plugin_cpu_paused_milliseconds_total",
        "kinformer_plugin_writes_total",
        "kinformer_plugin_http_requests_total",
        "kinformer_informer_objects",
        "kinformer_informer_lists_total",
        "leader_election_master_status",
        "kinformer_rollout_compared_total",
    ] {
        assert!(charted.contains(metric), "no panel shows {metric}");
    }

    // A live host with every kind of plugin.
    let (web, _received) = kinformer_tests::http::serve().await;
    let workload = Workload::default().seed(11).size(2, 2, 3).changes_per_second(20.0);
    let (_server, _churn, client) = cluster(&workload).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    install(d, "pods", "delta-logger.wasm", Some("config = \"v1/Pod\"\n"));
    install(d, "flood", "writer.wasm", Some(FLOOD_MANIFEST));
    install(d, "rs", "reconciler.wasm", Some("config = \"rs\"\n"));
    install(
        d,
        "rs.next",
        "reconciler.wasm",
        Some("config = \"rs-next\"\n[rollout]\nmode = \"shadow\"\n"),
    );
    install(
        d,
        "fetcher",
        "hostile.wasm",
        Some(&format!(
            "config = \"fetch=http://{web}/ok\"\n[grant.http]\nallow = [\"http://{web}\"]\nnetworks = [\"127.0.0.1/32\"]\n"
        )),
    );
    let election = LeaderElectionConfig::new("kinformer", "default", "replica-a")
        .per_plugin(true)
        .durations(
            Duration::from_secs(4),
            Duration::from_secs(3),
            Duration::from_millis(500),
        );
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = RuntimeConfig::new(d).status_address(address).leader_election(election);
    let runtime = Runtime::start(client, config).await.unwrap();
    until(
        "every plugin to work: deltas, writes, reconciles, a shadow, HTTP, a Lease",
        Duration::from_secs(120),
        || {
            let of = |name: &str| plugin_status(&runtime, name);
            of("pods").deltas > 0
                && of("flood").writes > 0
                && of("rs").reconciles > 0
                && of("rs").rollout.is_some()
                && of("rs.next").state == PluginState::Running
                && of("fetcher").http_requests > 0
                && runtime.leader().is_some_and(|leader| leader.leads.len() >= 2)
        },
    )
    .await;
    let (code, text) = http_get(address, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    drop(runtime.shutdown().await);
    let families = exposition(&text);

    let mut missing = missing(&dashboard_queries, &families);
    missing.extend(self::missing(&rule_queries, &families));
    assert!(
        missing.is_empty(),
        "the dashboard or the alerts name what /metrics lacks:\n{}\n\n/metrics:\n{text}",
        missing.join("\n")
    );
}
