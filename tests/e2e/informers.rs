//! Shared informers against the emulated API server: sharing, and convergence of
//! the cache and of every handler's view through random writes and faults.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiserver_sim::store::{Filter, ListOptions, PatchType, Preconditions, ResourceId};
use apiserver_sim::{ApiServer, SimConfig};
use kinformer::delta::DeltaType;
use kinformer::informer::{InformerKey, SharedInformerFactory};
use kinformer::processor::ListenerOptions;
use kube::api::GroupVersionKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::time::timeout;

fn configmaps_key() -> InformerKey {
    InformerKey::new(GroupVersionKind::gvk("", "v1", "ConfigMap"))
}

async fn start(config: SimConfig) -> (ApiServer, SharedInformerFactory) {
    let server = ApiServer::start(config).await.expect("the emulated server starts");
    let client = kube::Client::try_from(server.client_config()).expect("a client for the emulated server");
    (server, SharedInformerFactory::new(client))
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    timeout(Duration::from_secs(30), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_subscribers_share_one_watch_and_the_last_one_stops_it() {
    let (server, factory) = start(SimConfig::default()).await;
    let first = factory.informer(configmaps_key()).await.unwrap();
    let second = factory.informer(configmaps_key()).await.unwrap();
    let other_scope = factory.informer(configmaps_key().namespace("default")).await.unwrap();
    assert_eq!(factory.running_count(), 2);
    until("all informers synced", || {
        first.has_synced() && other_scope.has_synced()
    })
    .await;
    until("both watches are open", || {
        server.stats().watches_open.get("configmaps") == Some(&2)
    })
    .await;
    // One watch for the shared key, one for the namespaced one: not three.
    assert_eq!(server.stats().watches_opened.get("configmaps"), Some(&2));

    drop(first);
    drop(other_scope);
    assert_eq!(factory.running_count(), 1, "the second subscriber keeps its informer");
    drop(second);
    assert_eq!(factory.running_count(), 0);
    until("the watches are closed", || {
        server.stats().watches_open.get("configmaps") == Some(&0)
    })
    .await;
}

/// What one handler saw: the last delta per key, and whether any key went back in
/// resourceVersion.
#[derive(Default)]
struct Seen {
    last: HashMap<String, (DeltaType, u64, String)>,
    regressions: Vec<String>,
    overflows: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_and_every_handler_converge_on_the_server_state_through_faults() {
    let (server, factory) = start(SimConfig::default().compaction_window(300)).await;
    let hooked = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = Arc::clone(&hooked);
    let factory = factory.on_watch_error(move |_, _| {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let namespaces = ResourceId::new("", "v1", "namespaces");
    let configmaps = ResourceId::new("", "v1", "configmaps");
    for namespace in ["a", "b", "c"] {
        server
            .store()
            .create(&namespaces, None, json!({"metadata": {"name": namespace}}))
            .unwrap();
    }
    let informer = factory.informer(configmaps_key()).await.unwrap();
    let fast = informer.add_listener("fast", &ListenerOptions::default());
    // A handler with a tiny queue that reads slowly: it overflows into catch-up.
    let slow = informer.add_listener("slow", &ListenerOptions::default().queue_capacity(16));
    let consume = |mut handler: kinformer::processor::Listener, pause: Duration| {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let record = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Some(batch) = handler.next_batch(64).await {
                {
                    let mut seen = record.lock().unwrap();
                    for delta in batch {
                        let rv: u64 = delta.object.resource_version().parse().unwrap();
                        let key = delta.key().to_owned();
                        if let Some(&(_, last_rv, _)) = seen.last.get(&key)
                            && rv < last_rv
                        {
                            seen.regressions
                                .push(format!("{key}: {last_rv} -> {rv} ({})", delta.delta_type));
                        }
                        seen.last
                            .insert(key, (delta.delta_type, rv, delta.object.uid().to_owned()));
                    }
                    seen.overflows = handler.stats().overflows;
                }
                tokio::time::sleep(pause).await;
            }
        });
        (seen, task)
    };
    let fast = consume(fast, Duration::ZERO);
    let slow = consume(slow, Duration::from_millis(20));

    let mut rng = StdRng::seed_from_u64(11);
    for step in 0..3000 {
        let namespace = ["a", "b", "c"][rng.random_range(0..3)];
        let name = format!("cm-{}", rng.random_range(0..50));
        let store = server.store();
        let _ = match rng.random_range(0..10) {
            0..4 => store.create(&configmaps, Some(namespace), json!({"metadata": {"name": name}})),
            4..8 => store.patch(
                &configmaps,
                Some(namespace),
                &name,
                PatchType::Merge,
                json!({"data": {"v": step.to_string()}}),
                false,
            ),
            _ => store.delete(&configmaps, Some(namespace), &name, &Preconditions::default()),
        };
        match step % 400 {
            100 => server.faults().close_watches(),
            200 => {
                server.faults().expire_next_watch();
                server.faults().close_watches();
            }
            300 => store.compact(),
            _ => {}
        }
        if step % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    // The server's state: key -> (uid, resourceVersion).
    let page = server
        .store()
        .list(&configmaps, &Filter::default(), &ListOptions::default())
        .unwrap();
    let expected: BTreeMap<String, (String, u64)> = page
        .items
        .iter()
        .map(|o| {
            (
                o.key.clone(),
                (
                    o.value["metadata"]["uid"].as_str().unwrap().to_owned(),
                    o.resource_version,
                ),
            )
        })
        .collect();
    let cache = informer.cache();
    until("the cache equals the server's state", || {
        let cached: BTreeMap<String, (String, u64)> = cache
            .list_all()
            .iter()
            .map(|o| {
                (
                    o.key().to_owned(),
                    (o.uid().to_owned(), o.resource_version().parse().unwrap()),
                )
            })
            .collect();
        cached == expected
    })
    .await;
    assert!(informer.watch_errors() >= 1, "the injected 410 was seen");
    // The counter moves before the hook runs: read the hook's count first.
    let hook_calls = hooked.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        hook_calls >= 1 && hook_calls <= informer.watch_errors(),
        "watch errors reached the hook: {hook_calls} of {}",
        informer.watch_errors()
    );

    // Every handler's last word on every key is the server's state.
    for (name, (seen, task)) in [("fast", fast), ("slow", slow)] {
        until(&format!("the {name} handler's view equals the server's state"), || {
            let seen = seen.lock().unwrap();
            let live: BTreeMap<String, (String, u64)> = seen
                .last
                .iter()
                .filter(|(_, (delta_type, _, _))| *delta_type != DeltaType::Deleted)
                .map(|(key, (_, rv, uid))| (key.clone(), (uid.clone(), *rv)))
                .collect();
            live == expected
        })
        .await;
        let seen = seen.lock().unwrap();
        assert!(
            seen.regressions.is_empty(),
            "{name}: resourceVersion went back: {:?}",
            seen.regressions
        );
        if name == "slow" {
            assert!(seen.overflows >= 1, "the slow handler never overflowed into catch-up");
        }
        task.abort();
    }
}
