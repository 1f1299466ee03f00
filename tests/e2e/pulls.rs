//! Handlers' module pulls under the address policy, against a registry's
//! stand-in on 127.0.0.1 (the tenant policy opens `127.0.0.1/32` only): no
//! request of a pull reaches an address a plugin could not (a layer's
//! `urls`, a redirect, a token realm), nothing a server answers reaches the
//! tenant's status or Events, a refused pull is not made again, and a
//! cached digest runs for a namespace only once its own credentials reach
//! the manifest. No traffic leaves loopback.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::sync::atomic::Ordering;
use std::time::Duration;

use kinformer::handlers::TenantPolicy;
use kinformer::handlers::oci::PullConfig;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::http::{Reply, serve_routes};
use kinformer_tests::runtime::listed_status;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use super::handlers::{condition, handler, pulled_logger, ready_reason, status_until, tenants_cluster};

/// What the server on 127.0.0.2 (not opened) answers: had any request of a
/// pull reached it, these words could reach the tenant.
const ELSEWHERE_SAYS: &str = "admin-users: root hunter2";
/// What the registry's stand-in says in its error bodies.
const REGISTRY_SAYS: &str = "registry-body: not for tenants";

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", kinformer::plugin::digest(bytes))
}

/// A Wasm artifact's manifest for `layer`, its layer's `urls` when given.
fn manifest(layer: &[u8], urls: Option<Vec<String>>) -> Vec<u8> {
    let mut wasm = json!({"mediaType": "application/wasm", "digest": digest(layer), "size": layer.len()});
    if let Some(urls) = urls {
        wasm["urls"] = json!(urls);
    }
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": digest(b"{}"), "size": 2},
        "layers": [wasm],
    }))
    .unwrap()
}

fn served(manifest: &[u8]) -> Reply {
    Reply::new(200)
        .header("content-type", MANIFEST_TYPE)
        .header("docker-content-digest", &digest(manifest))
        .body(manifest.to_vec())
}

/// A runtime running Handlers, tenants' pulls from `registry` only, on
/// `127.0.0.1/32` only; `insecure` spoken to over plain HTTP.
async fn pulling(client: &kube::Client, registry: &str, insecure: &[&str]) -> Runtime {
    let policy = TenantPolicy::parse(&format!(
        "[registries]\nallow = [\"{registry}\"]\nnetworks = [\"127.0.0.1/32\"]\n"
    ))
    .unwrap();
    let pull = insecure
        .iter()
        .fold(PullConfig::default(), |pull, registry| {
            pull.insecure_registry(*registry)
        })
        .timeout(Duration::from_secs(5));
    let config = RuntimeConfig::default().handlers(true).tenant_policy(policy).pull(pull);
    Runtime::start(client.clone(), config).await.unwrap()
}

/// The notes of every Event in `namespace`.
async fn event_notes(client: &kube::Client, namespace: &str) -> Vec<String> {
    let events: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("events.k8s.io", "v1", "Event")),
    );
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|event| event.data["note"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_of_a_pull_reaches_an_address_the_policy_refuses_and_no_answer_reaches_the_tenant() {
    let (_server, client) = tenants_cluster().await;
    let (elsewhere, elsewhere_got) = serve_routes(
        "127.0.0.2",
        vec![("/".to_owned(), Reply::new(200).body(ELSEWHERE_SAYS))],
    )
    .await;
    let layer = b"\0asm a layer".to_vec();
    // (a) a layer whose blob is missing but for its `urls`;
    let foreign = manifest(&layer, Some(vec![format!("http://{elsewhere}/admin/users")]));
    // (b) a blob redirected to another loopback address;
    let redirected = manifest(&layer, None);
    // (c) a token realm there.
    let challenge =
        format!("Bearer realm=\"http://{elsewhere}/token\",service=\"stand-in\",scope=\"repository:challenged:pull\"");
    let (registry, registry_got) = serve_routes(
        "127.0.0.1",
        vec![
            ("/v2/foreign/manifests/".to_owned(), served(&foreign)),
            ("/v2/foreign/blobs/".to_owned(), Reply::new(404).body(REGISTRY_SAYS)),
            ("/v2/redirected/manifests/".to_owned(), served(&redirected)),
            (
                "/v2/redirected/blobs/".to_owned(),
                Reply::new(307)
                    .header("location", &format!("http://{elsewhere}/latest/meta-data/"))
                    .body(REGISTRY_SAYS),
            ),
            (
                "/v2/challenged/".to_owned(),
                Reply::new(401)
                    .header("www-authenticate", &challenge)
                    .body(REGISTRY_SAYS),
            ),
            ("/v2/".to_owned(), Reply::new(200)),
        ],
    )
    .await;
    let registry = registry.to_string();
    // Plain HTTP is allowed to both: what refuses 127.0.0.2 is its address.
    let runtime = pulling(&client, &registry, &[&registry, &elsewhere.to_string()]).await;
    let pinned = |repository: &str, manifest: &[u8]| format!("{registry}/{repository}@{}", digest(manifest));
    handler(&client, "ns-0", "foreign", pulled_logger(&pinned("foreign", &foreign))).await;
    handler(
        &client,
        "ns-0",
        "redirected",
        pulled_logger(&pinned("redirected", &redirected)),
    )
    .await;
    handler(
        &client,
        "ns-0",
        "challenged",
        pulled_logger(&pinned("challenged", &redirected)),
    )
    .await;

    let elsewhere_at = format!("127.0.0.2:{}", elsewhere.port());
    for (name, says) in [
        ("foreign", "the registry answered 404 to the blob".to_owned()),
        (
            "redirected",
            format!(
                "a redirect to {elsewhere_at}, a loopback address the tenant policy's [registries] networks do not open, refused"
            ),
        ),
        (
            "challenged",
            format!(
                "the token realm at {elsewhere_at}, a loopback address the tenant policy's [registries] networks do not open, refused"
            ),
        ),
    ] {
        let message = ready_reason(&client, "ns-0", name, "PullFailed").await;
        assert!(message.contains(&says), "{name}: {message}");
        assert!(
            listed_status(&runtime, &format!("ns-0.{name}")).is_none(),
            "{name} runs"
        );
    }
    assert!(
        registry_got.count("GET /v2/foreign/blobs/") > 0 && registry_got.count("GET /v2/redirected/blobs/") > 0,
        "the blobs were asked for: {:?}",
        registry_got.lines()
    );
    // The missing blob is tried again (a 404 may be mended by a push): its
    // retries do not reach the layer's `urls` either.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(elsewhere_got.lines(), Vec::<String>::new(), "a pull reached 127.0.0.2");

    let mut seen: Vec<String> = event_notes(&client, "ns-0").await;
    for name in ["foreign", "redirected", "challenged"] {
        let status = status_until(&client, "ns-0", name, "a status", |status| !status.is_null()).await;
        seen.push(status.to_string());
    }
    assert!(seen.iter().any(|text| text.contains("404 to the blob")), "{seen:#?}");
    for text in &seen {
        assert!(
            !text.contains(ELSEWHERE_SAYS) && !text.contains(REGISTRY_SAYS),
            "a server's words reached the tenant: {text}"
        );
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_manifest_is_refused_unread_and_not_pulled_again() {
    let (_server, client) = tenants_cluster().await;
    let (declared, declared_sent) = Reply::new(200)
        .header("content-type", MANIFEST_TYPE)
        .header("content-length", &(512u64 << 20).to_string())
        .endless();
    let (chunked, chunked_sent) = Reply::new(200)
        .header("content-type", MANIFEST_TYPE)
        .header("transfer-encoding", "chunked")
        .endless();
    let (registry, registry_got) = serve_routes(
        "127.0.0.1",
        vec![
            ("/v2/declared/".to_owned(), declared),
            ("/v2/chunked/".to_owned(), chunked),
            ("/v2/".to_owned(), Reply::new(200)),
        ],
    )
    .await;
    let registry = registry.to_string();
    let runtime = pulling(&client, &registry, &[&registry]).await;
    let some_digest = format!("sha256:{}", "1".repeat(64));
    for name in ["declared", "chunked"] {
        handler(
            &client,
            "ns-0",
            name,
            pulled_logger(&format!("{registry}/{name}@{some_digest}")),
        )
        .await;
    }
    for name in ["declared", "chunked"] {
        let message = ready_reason(&client, "ns-0", name, "PullFailed").await;
        assert!(
            message.contains("the manifest is over 4194304 bytes"),
            "{name}: {message}"
        );
    }
    // What went is what the sockets' buffers hold, not 512 MiB nor an
    // endless stream.
    for (name, sent) in [("declared", &declared_sent), ("chunked", &chunked_sent)] {
        let sent = sent.load(Ordering::Relaxed);
        assert!(sent < 64 << 20, "{name}: the host read {sent} bytes of a manifest");
    }
    // A refusal is final until the Handler changes: no pull over the next
    // period in which the Handlers are looked at again.
    let asked = |name: &str| registry_got.count(&format!("GET /v2/{name}/manifests/"));
    assert_eq!(
        (asked("declared"), asked("chunked")),
        (1, 1),
        "{:?}",
        registry_got.lines()
    );
    tokio::time::sleep(kinformer::handlers::MODULE_RECHECK + Duration::from_secs(3)).await;
    assert_eq!(
        (asked("declared"), asked("chunked")),
        (1, 1),
        "a refused pull was made again: {:?}",
        registry_got.lines()
    );
    let status = status_until(&client, "ns-0", "declared", "still refused", |status| !status.is_null()).await;
    assert_eq!(condition(&status, "Ready")["reason"], "PullFailed");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_digest_runs_for_a_namespace_only_once_its_own_credentials_reach_the_manifest() {
    let (_server, client) = tenants_cluster().await;
    let module = plugin_artifacts::DELTA_LOGGER;
    let artifact = manifest(module, None);
    let (registry, registry_got) = serve_routes(
        "127.0.0.1",
        vec![
            ("/v2/team-a/logger/manifests/".to_owned(), served(&artifact)),
            (
                "/v2/team-a/logger/blobs/".to_owned(),
                Reply::new(200)
                    .header("content-type", "application/octet-stream")
                    .body(module.to_vec()),
            ),
            // team-b's repository holds the same digest, and anonymous
            // credentials do not reach it.
            (
                "/v2/team-b/logger/".to_owned(),
                Reply::new(401)
                    .header("www-authenticate", "Basic realm=\"stand-in\"")
                    .body(REGISTRY_SAYS),
            ),
            ("/v2/".to_owned(), Reply::new(200)),
        ],
    )
    .await;
    let registry = registry.to_string();
    let runtime = pulling(&client, &registry, &[&registry]).await;
    let team_a = format!("{registry}/team-a/logger@{}", digest(&artifact));
    let team_b = format!("{registry}/team-b/logger@{}", digest(&artifact));

    // Namespace ns-0 pulls the digest from team-a: it is in the cache.
    handler(&client, "ns-0", "logger", pulled_logger(&team_a)).await;
    let ready = status_until(&client, "ns-0", "logger", "Ready", |status| {
        condition(status, "Ready")["status"] == "True"
    })
    .await;
    assert_eq!(ready["digest"], digest(&artifact));

    // ns-1 names it under team-b, which its credentials cannot read: the
    // cache does not run it.
    handler(&client, "ns-1", "logger", pulled_logger(&team_b)).await;
    let message = ready_reason(&client, "ns-1", "logger", "PullFailed").await;
    assert!(
        message.contains("the registry answered 401 to the HEAD of the manifest"),
        "{message}"
    );
    assert!(!message.contains(REGISTRY_SAYS), "{message}");
    assert!(registry_got.count("HEAD /v2/team-b/logger/manifests/") > 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        listed_status(&runtime, "ns-1.logger").is_none(),
        "ns-1 runs team-b's digest"
    );

    // Under team-a, which it may read, ns-1 runs it from the cache: a HEAD,
    // no second download.
    handler(&client, "ns-1", "reader", pulled_logger(&team_a)).await;
    status_until(&client, "ns-1", "reader", "Ready from the cache", |status| {
        condition(status, "Ready")["status"] == "True"
    })
    .await;
    assert!(registry_got.count("HEAD /v2/team-a/logger/manifests/") > 0);
    assert_eq!(
        registry_got.count("GET /v2/team-a/logger/blobs/"),
        1,
        "{:?}",
        registry_got.lines()
    );
    runtime.shutdown().await;
}
