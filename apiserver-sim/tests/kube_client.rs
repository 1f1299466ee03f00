//! The emulated API server driven by the real kube-rs client over HTTP.

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver_sim::{ApiServer, SimConfig};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::timeout;

async fn start(config: SimConfig) -> (ApiServer, Client) {
    let server = ApiServer::start(config)
        .await
        .expect("the server binds a loopback port");
    let client = Client::try_from(server.client_config()).expect("a client for the server");
    (server, client)
}

fn configmap(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (*k, *v)).collect::<BTreeMap<_, _>>()},
        "data": {"key": "value"}
    }))
    .expect("a valid configmap")
}

fn api_code(error: kube::Error) -> u16 {
    match error {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crud_follows_kubernetes_semantics() {
    let (_server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);

    let created = api
        .create(&PostParams::default(), &configmap("settings", &[]))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some(), "uid is server-set");
    assert!(created.metadata.creation_timestamp.is_some());
    let rv1: u64 = created.resource_version().unwrap().parse().unwrap();

    let duplicate = api.create(&PostParams::default(), &configmap("settings", &[])).await;
    assert_eq!(api_code(duplicate.unwrap_err()), 409);

    let mut changed = created.clone();
    changed.data = Some([("key".to_owned(), "new".to_owned())].into());
    let updated = api.replace("settings", &PostParams::default(), &changed).await.unwrap();
    let rv2: u64 = updated.resource_version().unwrap().parse().unwrap();
    assert!(rv2 > rv1);

    // The first version is stale now: optimistic concurrency refuses it.
    let stale = api.replace("settings", &PostParams::default(), &changed).await;
    assert_eq!(api_code(stale.unwrap_err()), 409);

    let patched = api
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["extra"], "1");
    let applied = api
        .patch(
            "applied",
            &PatchParams::apply("test").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.name_any(), "applied");

    api.delete("settings", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(api.get("settings").await.unwrap_err()), 404);
    let invalid = api.create(&PostParams::default(), &configmap("Not_Valid", &[])).await;
    assert_eq!(api_code(invalid.unwrap_err()), 422);
    let nowhere: Api<ConfigMap> = Api::namespaced(api.clone().into_client(), "missing");
    assert_eq!(
        api_code(
            nowhere
                .create(&PostParams::default(), &configmap("x", &[]))
                .await
                .unwrap_err()
        ),
        404
    );
}

#[tokio::test]
async fn label_selectors_filter_lists() {
    // No controllers: the namespace holds only the ConfigMaps written here, not kube-root-ca.crt.
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for (name, app, tier) in [
        ("a", "web", "front"),
        ("b", "web", "back"),
        ("c", "db", "back"),
        ("d", "cache", ""),
    ] {
        let labels: Vec<(&str, &str)> = [("app", app), ("tier", tier)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .collect();
        api.create(&PostParams::default(), &configmap(name, &labels))
            .await
            .unwrap();
    }
    let names = |list: kube::api::ObjectList<ConfigMap>| list.items.iter().map(|cm| cm.name_any()).collect::<Vec<_>>();
    let select = |selector: &'static str| {
        let api = api.clone();
        async move { names(api.list(&ListParams::default().labels(selector)).await.unwrap()) }
    };
    assert_eq!(select("app=web").await, ["a", "b"]);
    assert_eq!(select("app in (web,db),tier!=front").await, ["b", "c"]);
    assert_eq!(select("!tier").await, ["d"]);
    assert_eq!(select("tier notin (back)").await, ["a", "d"]);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=c"))
        .await
        .unwrap();
    assert_eq!(names(by_name), ["c"]);
}

#[tokio::test]
async fn paged_lists_are_consistent_and_expire_after_compaction() {
    // No controllers: the namespace holds only the ConfigMaps written here, not kube-root-ca.crt.
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for i in 0..25 {
        api.create(&PostParams::default(), &configmap(&format!("cm-{i:02}"), &[]))
            .await
            .unwrap();
    }
    let first = api.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(first.items.len(), 10);
    let token = first.metadata.continue_.clone().expect("more pages");

    // Changes between pages do not leak into them: the list is a snapshot.
    api.delete("cm-15", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &configmap("cm-99", &[]))
        .await
        .unwrap();
    let mut names: Vec<String> = first.items.iter().map(|cm| cm.name_any()).collect();
    let mut next = Some(token);
    while let Some(token) = next {
        let page = api
            .list(&ListParams::default().limit(10).continue_token(&token))
            .await
            .unwrap();
        assert_eq!(page.metadata.resource_version, first.metadata.resource_version);
        names.extend(page.items.iter().map(|cm| cm.name_any()));
        next = page.metadata.continue_.filter(|c| !c.is_empty());
    }
    let expected: Vec<String> = (0..25).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(names, expected);

    // Once a later change is compacted away, the snapshot cannot be served.
    let again = api.list(&ListParams::default().limit(10)).await.unwrap();
    api.create(&PostParams::default(), &configmap("later", &[]))
        .await
        .unwrap();
    server.store().compact();
    let expired = api
        .list(
            &ListParams::default()
                .limit(10)
                .continue_token(again.metadata.continue_.as_deref().unwrap()),
        )
        .await;
    assert_eq!(api_code(expired.unwrap_err()), 410);
}

#[tokio::test]
async fn a_watcher_sees_every_change_in_order() {
    let (server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    // The initial (empty) list completes first.
    loop {
        let event = timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("no initial list")
            .unwrap();
        if matches!(event, Some(watcher::Event::InitDone)) {
            break;
        }
    }
    let mut expected = Vec::new();
    for i in 0..50 {
        let cm = api
            .create(&PostParams::default(), &configmap(&format!("w-{i}"), &[]))
            .await
            .unwrap();
        expected.push(("apply", cm.name_any(), cm.resource_version().unwrap()));
        let patched = api
            .patch(
                &cm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"i": i.to_string()}})),
            )
            .await
            .unwrap();
        expected.push(("apply", cm.name_any(), patched.resource_version().unwrap()));
        if i % 5 == 0 {
            let answer = api.delete(&cm.name_any(), &DeleteParams::default()).await.unwrap();
            assert!(answer.is_right(), "a ConfigMap's delete answers a Status of success");
            // The deletion's resourceVersion: nothing else writes meanwhile.
            let deleted_at = server.store().resource_version().to_string();
            expected.push(("delete", cm.name_any(), deleted_at));
        }
    }
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        let event = timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("the watcher stopped receiving events")
            .unwrap()
            .expect("the stream ended");
        match event {
            watcher::Event::Apply(cm) => seen.push(("apply", cm.name_any(), cm.resource_version().unwrap())),
            watcher::Event::Delete(cm) => seen.push(("delete", cm.name_any(), cm.resource_version().unwrap())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn watches_send_bookmarks_and_410_for_compacted_versions() {
    let config = SimConfig::default().bookmark_interval(Duration::from_millis(50));
    let (server, client) = start(config).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let cm = api
        .create(&PostParams::default(), &configmap("one", &[]))
        .await
        .unwrap();
    let old_rv = cm.resource_version().unwrap();

    let params = WatchParams::default().timeout(10);
    let mut stream = api.watch(&params, &old_rv).await.unwrap().boxed();
    let bookmark = timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("no bookmark")
        .unwrap();
    match bookmark {
        Some(WatchEvent::Bookmark(bookmark)) => {
            assert!(bookmark.metadata.resource_version.parse::<u64>().unwrap() >= old_rv.parse().unwrap())
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }

    api.create(&PostParams::default(), &configmap("two", &[]))
        .await
        .unwrap();
    server.store().compact();
    let mut stream = api.watch(&params, &old_rv).await.unwrap().boxed();
    match timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("no answer")
        .unwrap()
    {
        Some(WatchEvent::Error(error)) => assert_eq!(error.code, 410),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

/// Waits until the server has `count` open watches on configmaps.
async fn watches_open(server: &ApiServer, count: u64) {
    timeout(Duration::from_secs(10), async {
        while server.stats().watches_open.get("configmaps").copied().unwrap_or(0) < count {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the watcher never opened its watch");
}

type Events = tokio::sync::mpsc::UnboundedReceiver<watcher::Result<watcher::Event<ConfigMap>>>;

/// Drives a watcher in a task (a watch is only requested while its stream is
/// polled) and hands over its events.
fn drive(api: Api<ConfigMap>) -> Events {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            if tx.send(event).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next event that is not a reported 410 (the watcher reports it, then relists).
async fn next_event(events: &mut Events) -> watcher::Event<ConfigMap> {
    loop {
        match timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("the watcher went silent")
        {
            Some(Err(watcher::Error::WatchError(status))) if status.code == 410 => continue,
            other => return other.expect("the stream ended").expect("a watch error"),
        }
    }
}

#[tokio::test]
async fn a_watcher_rewatches_after_a_drop_and_relists_after_410() {
    // No controllers: the namespace holds only the ConfigMaps written here, not kube-root-ca.crt.
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &configmap("survivor", &[]))
        .await
        .unwrap();
    let mut events = drive(api.clone());
    while !matches!(next_event(&mut events).await, watcher::Event::InitDone) {}

    // A dropped watch is resumed from the last resourceVersion: no relist.
    watches_open(&server, 1).await;
    server.faults().close_watches();
    assert_eq!(server.faults().counts().watches_closed, 1);
    api.create(&PostParams::default(), &configmap("after-drop", &[]))
        .await
        .unwrap();
    match next_event(&mut events).await {
        watcher::Event::Apply(cm) => assert_eq!(cm.name_any(), "after-drop"),
        other => panic!("expected the new object, got {other:?}"),
    }

    // A 410 on the resumed watch forces a relist, which holds both objects.
    watches_open(&server, 1).await;
    server.faults().expire_next_watch();
    server.faults().close_watches();
    let mut relisted = Vec::new();
    loop {
        match next_event(&mut events).await {
            watcher::Event::Init => {}
            watcher::Event::InitApply(cm) => relisted.push(cm.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("expected a relist, got {other:?}"),
        }
    }
    assert_eq!(relisted, ["after-drop", "survivor"]);
    assert_eq!(server.faults().counts().expired_watches, 1);
}

#[tokio::test]
async fn streaming_lists_end_with_the_initial_events_bookmark() {
    // No controllers: the namespace holds only the ConfigMaps written here, not kube-root-ca.crt.
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &configmap(name, &[])).await.unwrap();
    }
    let mut events = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match timeout(Duration::from_secs(10), events.try_next())
            .await
            .expect("no streaming list")
            .unwrap()
        {
            Some(watcher::Event::Init) => {}
            Some(watcher::Event::InitApply(cm)) => initial.push(cm.name_any()),
            Some(watcher::Event::InitDone) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial, ["a", "b", "c"]);
}

#[tokio::test]
async fn status_is_written_through_its_subresource_and_generation_tracks_spec() {
    // Without the deployment controller, which would write the status too.
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let api: Api<Deployment> = Api::default_namespaced(client);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}}},
        "status": {"replicas": 99}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &deployment).await.unwrap();
    assert!(created.status.is_none(), "status is dropped on create");
    assert_eq!(created.metadata.generation, Some(1));

    let status = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().replicas, Some(1));
    assert_eq!(
        status.metadata.generation,
        Some(1),
        "a status write leaves the generation"
    );

    let scaled = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}, "status": {"replicas": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.metadata.generation, Some(2));
    assert_eq!(
        scaled.status.unwrap().replicas,
        Some(1),
        "the main resource does not write status"
    );
}

#[tokio::test]
async fn finalizers_delay_deletion() {
    let (_server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut cm = configmap("guarded", &[]);
    cm.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("guarded", &DeleteParams::default()).await.unwrap();
    let pending = api.get("guarded").await.unwrap();
    assert!(pending.metadata.deletion_timestamp.is_some());
    api.patch(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_code(api.get("guarded").await.unwrap_err()), 404);
}

#[tokio::test]
async fn discovery_finds_built_ins_and_custom_resources_registered_at_runtime() {
    let (_server, client) = start(SimConfig::default()).await;
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();

    let discovery = kube::discovery::Discovery::new(client.clone()).run().await.unwrap();
    let kinds: Vec<String> = discovery
        .groups()
        .flat_map(|group| group.recommended_resources())
        .map(|(resource, _)| resource.kind)
        .collect();
    for kind in [
        "Pod",
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Lease",
        "Widget",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} missing from {kinds:?}");
    }
    let (widget, _) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .unwrap();
    let widgets: Api<DynamicObject> = Api::default_namespaced_with(client, &widget);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}
    }))
    .unwrap();
    widgets.create(&PostParams::default(), &object).await.unwrap();
    assert_eq!(widgets.get("w1").await.unwrap().data["spec"]["size"], 3);
}

#[tokio::test]
async fn injected_errors_answer_with_their_status_and_are_counted() {
    let (server, client) = start(SimConfig::default()).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    // kube-rs retries 429 answers, honouring Retry-After: the list succeeds late.
    server.faults().fail_next_requests(2, 429);
    api.list(&ListParams::default()).await.unwrap();
    assert_eq!(server.faults().counts().failed_requests, 2);
    server.faults().fail_next_requests(1, 500);
    assert_eq!(api_code(api.get("x").await.unwrap_err()), 500);
    assert_eq!(server.faults().counts().failed_requests, 3);
}

#[tokio::test]
async fn forbidden_namespaces_answer_403_in_rbacs_words_and_confinement_allows_only_its_own() {
    let (server, client) = start(SimConfig::default()).await;
    let api = |namespace: &str| -> Api<ConfigMap> { Api::namespaced(client.clone(), namespace) };
    let everywhere: Api<ConfigMap> = Api::all(client.clone());
    let message = |error: kube::Error| match error {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("{other:?}"),
    };

    server.faults().forbid_in("configmaps", "locked");
    let (code, text) = message(api("locked").get("x").await.unwrap_err());
    assert_eq!(code, 403);
    assert_eq!(
        text,
        "configmaps \"x\" is forbidden: User \"system:serviceaccount:kinformer:kinformer\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"locked\""
    );
    api("open").list(&ListParams::default()).await.unwrap();
    let (_, text) = message(everywhere.list(&ListParams::default()).await.unwrap_err());
    assert!(
        text.ends_with("cannot list resource \"configmaps\" in API group \"\" at the cluster scope"),
        "{text}"
    );

    server.faults().confine("configmaps", ["a", "b"]);
    api("a").list(&ListParams::default()).await.unwrap();
    api("b").list(&ListParams::default()).await.unwrap();
    assert_eq!(message(api("c").list(&ListParams::default()).await.unwrap_err()).0, 403);
    assert_eq!(
        message(everywhere.list(&ListParams::default()).await.unwrap_err()).0,
        403
    );
    let watch = api("c").watch(&kube::api::WatchParams::default(), "0").await;
    let (_, text) = message(watch.err().expect("a forbidden watch"));
    assert!(text.contains("cannot watch resource"), "{text}");
    assert_eq!(server.faults().denied("configmaps"), 5);
    server.faults().allow("configmaps");
    everywhere.list(&ListParams::default()).await.unwrap();
}

#[tokio::test]
async fn a_forbidden_resource_answers_403_on_every_path_until_allowed() {
    let (server, client) = start(SimConfig::default()).await;
    let in_default: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let everywhere: Api<ConfigMap> = Api::all(client.clone());
    let deployments: Api<Deployment> = Api::default_namespaced(client);
    server.faults().forbid("configmaps");
    for error in [
        in_default.list(&ListParams::default()).await.unwrap_err(),
        everywhere.list(&ListParams::default()).await.unwrap_err(),
        in_default.get("x").await.unwrap_err(),
    ] {
        assert_eq!(api_code(error), 403);
    }
    // Other resources are served.
    deployments.list(&ListParams::default()).await.unwrap();
    server.faults().allow("configmaps");
    in_default.list(&ListParams::default()).await.unwrap();
    assert_eq!(server.faults().counts().failed_requests, 3);
}

#[tokio::test]
async fn a_hung_watch_stays_open_and_silent_until_resumed() {
    // No controllers: the namespace holds only the ConfigMaps written here, not kube-root-ca.crt.
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let rv = server.store().resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();
    server.faults().hang_watches(true);
    api.create(&PostParams::default(), &configmap("held", &[]))
        .await
        .unwrap();
    assert!(
        timeout(Duration::from_millis(300), stream.try_next()).await.is_err(),
        "a hung watch delivered an event"
    );
    server.faults().hang_watches(false);
    match timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("the watch never resumed")
        .unwrap()
    {
        Some(WatchEvent::Added(cm)) => assert_eq!(cm.name_any(), "held"),
        other => panic!("expected the held event, got {other:?}"),
    }
    assert_eq!(server.faults().counts().hangs, 1);
}

#[tokio::test]
async fn leases_take_optimistic_concurrency_two_writers_of_one_version_get_one_conflict() {
    use k8s_openapi::api::coordination::v1::Lease;
    let (_server, client) = start(SimConfig::default()).await;
    let api: Api<Lease> = Api::default_namespaced(client);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}
    }))
    .unwrap();
    let read = api.create(&PostParams::default(), &lease).await.unwrap();
    let mut by_b = read.clone();
    by_b.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let mut by_c = read.clone();
    by_c.spec.as_mut().unwrap().holder_identity = Some("c".into());
    api.replace("leader", &PostParams::default(), &by_b).await.unwrap();
    let lost = api.replace("leader", &PostParams::default(), &by_c).await;
    assert_eq!(api_code(lost.unwrap_err()), 409);
    let holder = api.get("leader").await.unwrap().spec.unwrap().holder_identity;
    assert_eq!(holder.as_deref(), Some("b"));
}

#[tokio::test]
async fn a_cut_off_client_gets_no_answer_while_others_do() {
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let client_for = |token: &str| {
        let mut config = server.client_config();
        config.auth_info.token = Some(token.to_owned().into());
        Client::try_from(config).unwrap()
    };
    let cut: Api<ConfigMap> = Api::default_namespaced(client_for("a"));
    let other: Api<ConfigMap> = Api::default_namespaced(client_for("b"));
    server.faults().cut_off("a", true);
    assert!(
        timeout(Duration::from_millis(300), cut.list(&ListParams::default()))
            .await
            .is_err(),
        "a cut-off client got an answer"
    );
    other.list(&ListParams::default()).await.unwrap();
    server.faults().cut_off("a", false);
    timeout(Duration::from_secs(5), cut.list(&ListParams::default()))
        .await
        .expect("a reconnected client got no answer")
        .unwrap();
    assert!(server.stats().faults.held_requests >= 1);
}

#[tokio::test]
async fn close_ends_open_watches_and_frees_the_store_before_it_returns() {
    // No controllers: the namespace holds only the ConfigMaps written here, not kube-root-ca.crt.
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &configmap("a", &[])).await.unwrap();
    let mut watch = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let first = timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the watch replays the configmap");
    assert!(matches!(first, Some(Ok(WatchEvent::Added(_)))), "{first:?}");
    let changes = server.store().subscribe();
    let address = server.address();

    timeout(Duration::from_secs(10), server.close())
        .await
        .expect("close returns once the connections have ended");

    assert!(
        changes.has_changed().is_err(),
        "the store was freed before close returned"
    );
    let after = timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the open watch ended");
    assert!(
        !matches!(after, Some(Ok(WatchEvent::Added(_) | WatchEvent::Modified(_)))),
        "{after:?}"
    );
    assert!(
        tokio::net::TcpStream::connect(address).await.is_err(),
        "nothing listens after close"
    );
}
