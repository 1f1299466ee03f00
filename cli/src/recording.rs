//! `kinformer record`: the initial state and then every delta of some
//! resources, from any cluster, into a file that `kinformer replay` feeds to a
//! plugin offline.
//!
//! # Format
//!
//! JSON lines, one delta per line, in the order the host delivered them: first
//! each resource's initial list (`"initial": true`, type `Added`), then the
//! live deltas of every resource as they came.
//!
//! A resource the server lists but does not watch (the resource metrics API:
//! metrics-server answers no watch) is listed at the start and again every
//! [`POLL_INTERVAL`], each list turned into the deltas that lead from the last
//! one to it, as client-go's `Replace` does.
//!
//! ```text
//! {"type":"Added","initial":true,"apiVersion":"apps/v1","kind":"Deployment","object":{...}}
//! {"type":"Updated","apiVersion":"v1","kind":"Pod","object":{...}}
//! {"type":"Deleted","apiVersion":"v1","kind":"Pod","object":{...}}
//! ```
//!
//! `type` is client-go's delta type (`Added`, `Updated`, `Deleted`,
//! `Replaced`, `Sync`); `object` is the object as plugins receive it (after
//! the host's default transform: no `managedFields`), its last known state for
//! `Deleted`. An `Updated` delta's previous state is the one recorded before
//! it, so it is not repeated. Lines that do not parse are refused with their
//! line number.
//!
//! With `--plugin`, the recording also keeps that plugin's outbound HTTP:
//! after the deltas, the plugin runs on them as `replay` runs it, but with
//! its requests sent for real (under its grant), and each answer is a line
//! of type `Http`, which `replay` answers the same request (method, URL,
//! body) with, in order:
//!
//! ```text
//! {"type":"Http","request":"POST https://hooks.slack.com:443/services/T0 9f86d0...","status":200,"headers":[["content-type","text/plain"]],"body":"b2s=","complete":true}
//! {"type":"Http","request":"GET http://alertmanager.monitoring.svc:9093/api/v2/status e3b0c4...","outcome":"timeout"}
//! ```

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kinformer::delta::{Delta, DeltaType};
use kinformer::informer::{InformerKey, SharedInformerFactory};
use kinformer::object::CachedObject;
use kinformer::outbound::Outcome;
use kinformer::plugin::{HttpAnswer, RecordedHttp};
use kinformer::processor::ListenerOptions;
use kube::api::GroupVersionKind;
use serde::{Deserialize, Serialize};

/// One `Http` line of a recording: a request, and the response it got or
/// how it ended without one.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpLine {
    #[serde(rename = "type")]
    line_type: String,
    request: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    complete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<String>,
}

/// Writes a plugin's recorded outbound HTTP as `Http` lines.
///
/// # Errors
///
/// When writing fails.
pub fn write_http(out: &mut (impl Write + ?Sized), answers: &[RecordedHttp]) -> anyhow::Result<()> {
    use base64::Engine as _;
    for (request, answer) in answers {
        let line = match answer {
            Ok(answer) => HttpLine {
                line_type: "Http".into(),
                request: request.clone(),
                status: Some(answer.status),
                headers: answer
                    .headers
                    .iter()
                    .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
                    .collect(),
                body: Some(base64::engine::general_purpose::STANDARD.encode(&answer.body)),
                complete: answer.complete,
                outcome: None,
            },
            Err(outcome) => HttpLine {
                line_type: "Http".into(),
                request: request.clone(),
                status: None,
                headers: Vec::new(),
                body: None,
                complete: false,
                outcome: Some(outcome.as_str().to_owned()),
            },
        };
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

fn read_http(line: HttpLine) -> anyhow::Result<RecordedHttp> {
    use base64::Engine as _;
    let answer = match (line.status, line.outcome.as_deref()) {
        (Some(status), None) => {
            let mut headers = http::HeaderMap::new();
            for (name, value) in line.headers {
                headers.append(
                    http::HeaderName::try_from(name.as_str())?,
                    http::HeaderValue::try_from(value.as_str())?,
                );
            }
            let body = base64::engine::general_purpose::STANDARD.decode(line.body.unwrap_or_default())?;
            let answer = HttpAnswer::new(status, headers, body.into());
            Ok(if line.complete { answer } else { answer.truncated() })
        }
        (None, Some(outcome)) => Err(Outcome::parse(outcome).with_context(|| format!("unknown outcome {outcome:?}"))?),
        _ => anyhow::bail!("an Http line has a status or an outcome"),
    };
    Ok((line.request, answer))
}

/// A recording: the deltas, and a plugin's outbound HTTP when it was
/// recorded with `--plugin`.
#[derive(Debug, Default)]
pub struct Recording {
    /// The deltas, in order.
    pub deltas: Vec<Recorded>,
    /// The plugin's requests and their answers, in order.
    pub http: Vec<RecordedHttp>,
}

/// One line of a recording.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    #[serde(rename = "type")]
    delta_type: &'a str,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    initial: bool,
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
}

/// One recorded delta: what happened, to which resource, and the object.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// What happened.
    pub delta_type: DeltaType,
    /// Part of a resource's initial state.
    pub initial: bool,
    /// The resource type.
    pub gvk: Arc<GroupVersionKind>,
    /// The object: its new state, or its last known state for `Deleted`.
    pub object: Arc<CachedObject>,
}

/// `v1/Pod` or `apps/v1/Deployment` (apiVersion/Kind) as a resource type.
///
/// # Errors
///
/// When it has not two or three non-empty parts.
pub fn parse_resource(resource: &str) -> anyhow::Result<GroupVersionKind> {
    match resource.split('/').collect::<Vec<_>>()[..] {
        [version, kind] if !version.is_empty() && !kind.is_empty() => Ok(GroupVersionKind::gvk("", version, kind)),
        [group, version, kind] if [group, version, kind].iter().all(|part| !part.is_empty()) => {
            Ok(GroupVersionKind::gvk(group, version, kind))
        }
        _ => anyhow::bail!("bad resource {resource:?}: want apiVersion/Kind, e.g. v1/Pod or apps/v1/Deployment"),
    }
}

/// Writes `delta` as one line of a recording.
///
/// # Errors
///
/// When writing fails.
pub fn write_delta(out: &mut (impl Write + ?Sized), delta: &Delta) -> anyhow::Result<()> {
    let object: &serde_json::value::RawValue = serde_json::from_str(delta.object.json())?;
    let (delta_type, api_version) = (delta.delta_type.to_string(), delta.gvk.api_version());
    let line = Line {
        delta_type: &delta_type,
        initial: delta.initial_list,
        api_version: &api_version,
        kind: &delta.gvk.kind,
        object,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Reads a recording's deltas.
///
/// # Errors
///
/// When it cannot be read, or a line is not a recorded delta (with its number).
pub fn read(recording: impl BufRead) -> anyhow::Result<Vec<Recorded>> {
    Ok(read_recording(recording)?.deltas)
}

/// Reads a recording: its deltas, and its `Http` lines.
///
/// # Errors
///
/// When it cannot be read, or a line is neither a recorded delta nor an
/// answer (with its number).
pub fn read_recording(recording: impl BufRead) -> anyhow::Result<Recording> {
    let mut http = Vec::new();
    let mut deltas = Vec::new();
    let mut gvks: Vec<Arc<GroupVersionKind>> = Vec::new();
    for (number, line) in recording.lines().enumerate() {
        let text = line?;
        if text.trim().is_empty() {
            continue;
        }
        if text.starts_with("{\"type\":\"Http\"") {
            let answer = serde_json::from_str(&text)
                .map_err(anyhow::Error::from)
                .and_then(read_http)
                .with_context(|| format!("line {}", number + 1))?;
            http.push(answer);
            continue;
        }
        let mut parsed = || -> anyhow::Result<Recorded> {
            let line: Line<'_> = serde_json::from_str(&text)?;
            let delta_type = match line.delta_type {
                "Added" => DeltaType::Added,
                "Updated" => DeltaType::Updated,
                "Deleted" => DeltaType::Deleted,
                "Replaced" => DeltaType::Replaced,
                "Sync" => DeltaType::Sync,
                other => anyhow::bail!("unknown delta type {other:?}"),
            };
            let gvk = parse_resource(&format!("{}/{}", line.api_version, line.kind))?;
            let gvk = match gvks.iter().find(|known| ***known == gvk) {
                Some(known) => Arc::clone(known),
                None => {
                    gvks.push(Arc::new(gvk));
                    Arc::clone(gvks.last().expect("just pushed"))
                }
            };
            Ok(Recorded {
                delta_type,
                initial: line.initial,
                gvk,
                object: Arc::new(CachedObject::from_json(line.object.get())?),
            })
        };
        deltas.push(parsed().with_context(|| format!("line {}", number + 1))?);
    }
    Ok(Recording { deltas, http })
}

/// How often a resource that cannot be watched is listed again: metrics-server's
/// default resolution.
pub const POLL_INTERVAL: Duration = Duration::from_secs(15);

/// A resource recorded by listing it again and again.
struct Polled {
    gvk: Arc<GroupVersionKind>,
    api: kube::Api<kube::api::DynamicObject>,
    /// The last list's objects, by namespace/name.
    last: std::collections::BTreeMap<String, Arc<CachedObject>>,
}

impl Polled {
    /// Lists the resource; returns the deltas from the last list to this one.
    async fn poll(&mut self, initial: bool) -> anyhow::Result<Vec<Delta>> {
        let list = self
            .api
            .list(&kube::api::ListParams::default())
            .await
            .with_context(|| format!("list {}", self.gvk.kind))?;
        let mut now = std::collections::BTreeMap::new();
        let mut deltas = Vec::new();
        for item in list.items {
            let mut value = serde_json::to_value(&item)?;
            value["apiVersion"] = self.gvk.api_version().into();
            value["kind"] = self.gvk.kind.clone().into();
            let object = Arc::new(CachedObject::from_value(&value)?);
            let key = match &item.metadata.namespace {
                Some(namespace) => format!("{namespace}/{}", item.metadata.name.unwrap_or_default()),
                None => item.metadata.name.unwrap_or_default(),
            };
            let delta_type = match self.last.remove(&key) {
                None => Some(DeltaType::Added),
                Some(last) => (last.json() != object.json()).then_some(DeltaType::Updated),
            };
            if let Some(delta_type) = delta_type {
                let delta = Delta::new(delta_type, self.gvk.clone(), object.clone());
                deltas.push(if initial { delta.in_initial_list() } else { delta });
            }
            now.insert(key, object);
        }
        for (_, gone) in std::mem::replace(&mut self.last, now) {
            deltas.push(Delta::new(DeltaType::Deleted, self.gvk.clone(), gone));
        }
        Ok(deltas)
    }
}

/// Records the initial state, then every delta of `resources` (in
/// `namespace`, or all) into `out` until `stop` completes; returns how many
/// deltas it wrote.
///
/// # Errors
///
/// When the server does not serve a resource, or writing fails.
pub async fn record(
    client: kube::Client,
    resources: &[GroupVersionKind],
    namespace: Option<&str>,
    out: &mut impl Write,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<u64> {
    let factory = SharedInformerFactory::new(client.clone());
    let mut informers = Vec::new();
    let mut polled = Vec::new();
    for gvk in resources {
        let (resource, capabilities) = kube::discovery::pinned_kind(&client, gvk)
            .await
            .with_context(|| format!("the server does not serve {}", gvk.api_version() + "/" + &gvk.kind))?;
        if !capabilities.supports_operation(kube::discovery::verbs::WATCH) {
            let api = match namespace {
                Some(namespace) => kube::Api::namespaced_with(client.clone(), namespace, &resource),
                None => kube::Api::all_with(client.clone(), &resource),
            };
            polled.push(Polled {
                gvk: Arc::new(gvk.clone()),
                api,
                last: std::collections::BTreeMap::new(),
            });
            continue;
        }
        let mut key = InformerKey::new(gvk.clone());
        if let Some(namespace) = namespace {
            key = key.namespace(namespace);
        }
        informers.push(factory.informer(key).await?);
    }
    let mut written = 0_u64;
    for resource in &mut polled {
        for delta in resource.poll(true).await? {
            write_delta(&mut *out, &delta)?;
            written += 1;
        }
    }
    while !informers
        .iter()
        .all(kinformer::informer::SharedIndexInformer::has_synced)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Each listener first hands out its resource's synced cache as an initial list.
    let mut listeners: Vec<_> = informers
        .iter()
        .map(|informer| informer.add_listener("record", &ListenerOptions::default()))
        .collect();
    let mut polled_written = 0_u64;
    let mut drain = |out: &mut dyn Write| -> anyhow::Result<()> {
        for listener in &mut listeners {
            while let Some(batch) = listener.try_next_batch(1024) {
                for delta in &batch {
                    write_delta(&mut *out, delta)?;
                    written += 1;
                }
            }
        }
        Ok(())
    };
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + POLL_INTERVAL, POLL_INTERVAL);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = tick.tick() => drain(&mut *out)?,
            _ = poll.tick(), if !polled.is_empty() => {
                for resource in &mut polled {
                    // A failed list (metrics-server down) is a gap, not the end.
                    match resource.poll(false).await {
                        Ok(deltas) => for delta in &deltas {
                            write_delta(&mut *out, delta)?;
                            polled_written += 1;
                        },
                        Err(error) => tracing::warn!("{error:#}; listing again in {}s", POLL_INTERVAL.as_secs()),
                    }
                }
            }
        }
    }
    drain(&mut *out)?;
    out.flush()?;
    Ok(written + polled_written)
}
