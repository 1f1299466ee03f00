//! Random writes with interleaved watch drops, 410s and compactions: a kube-rs
//! reflector that relists and re-watches ends with exactly the server's state.

use std::collections::BTreeMap;
use std::time::Duration;

use apiserver_sim::store::{Filter, ListOptions, PatchType, Preconditions, ResourceId};
use apiserver_sim::{ApiServer, SimConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

fn server_state(server: &ApiServer, id: &ResourceId) -> BTreeMap<String, String> {
    let page = server
        .store()
        .list(id, &Filter::default(), &ListOptions::default())
        .expect("the server lists configmaps");
    page.items
        .iter()
        .map(|object| (object.key.clone(), object.resource_version.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflector_converges_on_the_server_state_through_faults() {
    // A small compaction window makes lagging watches expire as well.
    let server = ApiServer::start(SimConfig::default().compaction_window(200))
        .await
        .unwrap();
    let client = Client::try_from(server.client_config()).unwrap();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let api: Api<ConfigMap> = Api::all(client);
    let stream = reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    let driver = tokio::spawn(stream.for_each(|_| async {}));

    let namespaces = ResourceId::new("", "v1", "namespaces");
    let configmaps = ResourceId::new("", "v1", "configmaps");
    for namespace in ["a", "b", "c"] {
        server
            .store()
            .create(&namespaces, None, json!({"metadata": {"name": namespace}}))
            .unwrap();
    }
    let mut rng = StdRng::seed_from_u64(7);
    let mut faults = 0;
    for step in 0..3000 {
        let namespace = ["a", "b", "c"][rng.random_range(0..3)];
        let name = format!("cm-{}", rng.random_range(0..40));
        let store = server.store();
        match rng.random_range(0..10) {
            0..4 => {
                let _ = store.create(
                    &configmaps,
                    Some(namespace),
                    json!({"metadata": {"name": name}, "data": {"v": "0"}}),
                );
            }
            4..8 => {
                let _ = store.patch(
                    &configmaps,
                    Some(namespace),
                    &name,
                    PatchType::Merge,
                    json!({"data": {"v": step.to_string()}}),
                    false,
                );
            }
            _ => {
                let _ = store.delete(&configmaps, Some(namespace), &name, &Preconditions::default());
            }
        }
        if step % 250 == 125 {
            faults += 1;
            match faults % 3 {
                0 => server.faults().close_watches(),
                1 => {
                    server.faults().expire_next_watch();
                    server.faults().close_watches();
                }
                _ => store.compact(),
            }
        }
        if step % 50 == 0 {
            // Let the reflector run between bursts, as a real cluster's pace would.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    let expected = server_state(&server, &configmaps);
    assert!(expected.len() > 20, "the random walk should leave objects behind");
    let converged = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let cached: BTreeMap<String, String> = reader
                .state()
                .iter()
                .map(|cm| {
                    (
                        format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any()),
                        cm.resource_version().unwrap_or_default(),
                    )
                })
                .collect();
            if cached == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    driver.abort();
    converged.expect("the reflector never converged on the server's state after the faults");
    let counts = server.faults().counts();
    assert!(counts.expired_watches >= 1 && counts.watches_closed >= 1, "{counts:?}");
}
