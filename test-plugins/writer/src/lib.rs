//! A plugin that writes to the cluster, for the tests of write grants, write
//! rates, dry runs and events.
//!
//! Its config is `MODE:NAMESPACE`; it writes in `NAMESPACE`:
//!
//! - `script`: on its first delta, tries every kind of write once and logs
//!   `script STEP=OUTCOME ...`: create the ConfigMap `written`, update it,
//!   merge-patch and JSON-patch it, apply to it, patch the status and the
//!   scale of the Deployment `app-0`, record an event about `written`,
//!   delete it with a wrong uid (a conflict when granted) and then with its
//!   own. Watches ConfigMaps.
//! - `flood`: creates the ConfigMap `flood` on its first delta, then on every
//!   delta merge-patches it 5 times with a counter annotation, logging
//!   nothing. Watches Pods.
//! - `events`: on its first delta, records the same event about ConfigMap
//!   `config-0` twice and another once, and logs `events A=OUTCOME
//!   A-again=OUTCOME B=OUTCOME`. Watches ConfigMaps.
//! - `slow`: on its first delta, merge-patches ConfigMap `config-0` with a
//!   label and logs `slow patch=OUTCOME`. Watches
//!   ConfigMaps.
//! - `bench=N`: on its first delta, creates the ConfigMap `bench`, then
//!   merge-patches it `N` times, one after the other, with a counter
//!   annotation, and logs `bench patches=N failed=F ns=T`, T the time the
//!   patches took. Watches Namespaces. The benchmark's row 9 compares it with
//!   the same writes from kube-rs.

use kinformer_sdk::cluster::{self, DeleteOptions, EventType, ObjectRef, PatchType, WriteError};
use kinformer_sdk::{Delta, Error, Gvk, Handler, Registration, Result, info};
use serde_json::json;

struct Writer {
    mode: String,
    namespace: String,
    deltas: u64,
    writes: u64,
    /// How many patches `bench` mode makes.
    bench: u64,
}

fn outcome<T>(result: &std::result::Result<T, WriteError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(error) => error.kind(),
    }
}

fn configmaps() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

impl Handler for Writer {
    fn init(config: &str) -> Result<(Self, Registration)> {
        let Some((mode, namespace)) = config.split_once(':') else {
            return Err(Error::msg(format!("config {config:?}: want MODE:NAMESPACE")));
        };
        let (mode, bench) = match mode.split_once('=') {
            Some(("bench", count)) => match count.parse() {
                Ok(count) => ("bench", count),
                Err(_) => return Err(Error::msg(format!("bench={count}: want a count of writes"))),
            },
            _ => (mode, 0),
        };
        let watched = match mode {
            "flood" => Gvk::new("", "v1", "Pod"),
            "script" | "events" | "slow" => configmaps(),
            // Not what it writes: the benchmark times the writes alone.
            "bench" => Gvk::new("", "v1", "Namespace"),
            other => return Err(Error::msg(format!("unknown mode {other:?}"))),
        };
        let registration = Registration::new("writer", env!("CARGO_PKG_VERSION")).watch(watched);
        let plugin = Self {
            mode: mode.to_owned(),
            namespace: namespace.to_owned(),
            deltas: 0,
            writes: 0,
            bench,
        };
        Ok((plugin, registration))
    }

    fn handle(&mut self, _delta: Delta) -> Result<()> {
        self.deltas += 1;
        let first = self.deltas == 1;
        match self.mode.as_str() {
            "script" if first => self.script(),
            "flood" => self.flood(first),
            "events" if first => self.events(),
            "slow" if first => self.slow(),
            "bench" if first => self.bench(),
            _ => {}
        }
        Ok(())
    }
}

impl Writer {
    fn script(&self) {
        let ns = Some(self.namespace.as_str());
        let written = ObjectRef::new(&configmaps(), ns, "written");
        let deployments = Gvk::new("apps", "v1", "Deployment");
        let app = ObjectRef::new(&deployments, ns, "app-0");
        let mut steps: Vec<(&str, &str)> = Vec::new();

        let created = cluster::create(
            &configmaps(),
            ns,
            &json!({"metadata": {"name": "written"}, "data": {"step": "create"}}),
        );
        steps.push(("create", outcome(&created)));
        let uid = created
            .ok()
            .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
            .and_then(|object| object["metadata"]["uid"].as_str().map(str::to_owned));
        let updated = cluster::update(&written, &json!({"data": {"step": "update"}}));
        steps.push(("update", outcome(&updated)));
        let merged = cluster::patch(
            &written,
            PatchType::Merge,
            &json!({"metadata": {"labels": {"patched": "merge"}}}),
        );
        steps.push(("patch-merge", outcome(&merged)));
        let json_patched = cluster::patch(
            &written,
            PatchType::Json,
            &json!([{"op": "add", "path": "/data/json", "value": "yes"}]),
        );
        steps.push(("patch-json", outcome(&json_patched)));
        let applied = cluster::apply(
            &written,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"applied": "yes"}}),
            false,
        );
        steps.push(("apply", outcome(&applied)));
        let status = cluster::patch(
            &app.clone().subresource("status"),
            PatchType::Merge,
            &json!({"status": {"collisionCount": 7}}),
        );
        steps.push(("status", outcome(&status)));
        let scaled = cluster::patch(
            &app.subresource("scale"),
            PatchType::Merge,
            &json!({"spec": {"replicas": 5}}),
        );
        steps.push(("scale", outcome(&scaled)));
        let event = cluster::record_event(&written, EventType::Normal, "Written", "Write", "every verb once");
        steps.push(("event", outcome(&event)));
        let stale = cluster::delete(&written, &DeleteOptions::default().uid("not-its-uid"));
        steps.push(("delete-stale-uid", outcome(&stale)));
        let options = uid.map_or_else(DeleteOptions::default, |uid| DeleteOptions::default().uid(uid));
        let deleted = cluster::delete(&written, &options);
        steps.push(("delete", outcome(&deleted)));

        let line: Vec<String> = steps
            .iter()
            .map(|(step, outcome)| format!("{step}={outcome}"))
            .collect();
        info!("script {}", line.join(" "));
    }

    fn flood(&mut self, first: bool) {
        let ns = Some(self.namespace.as_str());
        if first {
            let created = cluster::create(&configmaps(), ns, &json!({"metadata": {"name": "flood"}}));
            info!("flood create={}", outcome(&created));
        }
        let flood = ObjectRef::new(&configmaps(), ns, "flood");
        for _ in 0..5 {
            self.writes += 1;
            let counter = self.writes.to_string();
            let _ = cluster::patch(
                &flood,
                PatchType::Merge,
                &json!({"metadata": {"annotations": {"writes": counter}}}),
            );
        }
    }

    fn bench(&self) {
        let ns = Some(self.namespace.as_str());
        let created = cluster::create(&configmaps(), ns, &json!({"metadata": {"name": "bench"}}));
        let bench = ObjectRef::new(&configmaps(), ns, "bench");
        let mut failed = u64::from(created.is_err());
        let started = std::time::Instant::now();
        for write in 0..self.bench {
            let patch = json!({"metadata": {"annotations": {"writes": write.to_string()}}});
            failed += u64::from(cluster::patch(&bench, PatchType::Merge, &patch).is_err());
        }
        let nanos = started.elapsed().as_nanos();
        info!("bench patches={} failed={failed} ns={nanos}", self.bench);
    }

    fn events(&self) {
        let config = ObjectRef::new(&configmaps(), Some(&self.namespace), "config-0");
        let event = |note: &str| cluster::record_event(&config, EventType::Warning, "Checked", "Check", note);
        let a = event("the same note");
        let again = event("the same note");
        let b = event("another note");
        info!("events A={} A-again={} B={}", outcome(&a), outcome(&again), outcome(&b));
    }

    fn slow(&self) {
        let config = ObjectRef::new(&configmaps(), Some(&self.namespace), "config-0");
        let patched = cluster::patch(
            &config,
            PatchType::Merge,
            &json!({"metadata": {"labels": {"slow": "written"}}}),
        );
        info!("slow patch={}", outcome(&patched));
    }
}

kinformer_sdk::plugin!(Writer);
