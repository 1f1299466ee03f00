//! `kinformer rbac` for the example plugins grants what their grants and
//! registrations need and nothing more, and the kustomize overlays of
//! `deploy/` render, carry that RBAC, run one replica or three with a Lease
//! per writing plugin and a PodDisruptionBudget, with probes and a restricted
//! security context, and pass an API server's dry-run; the tenants overlay
//! carries the Handler CRDs `kinformer crds` prints and the RBAC `kinformer
//! rbac --handlers` adds.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kinformer::grant::Verb;
use kinformer::manifest::{EnvValue, Manifest};
use kinformer::plugin::{EngineOptions, PluginEngine};
use kinformer_cli::rbac::RbacOptions;
use serde::Deserialize as _;

/// (namespace or `*` for the ClusterRole, apiGroup, resource, verb); a rule
/// for objects by name holds each as `resource#name`.
type Permission = (String, String, String, String);

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The YAML documents of a text.
fn documents(text: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| serde_yaml::Value::deserialize(document).unwrap())
        .filter(|value| !value.is_null())
        .collect()
}

fn kind(document: &serde_yaml::Value) -> &str {
    document["kind"].as_str().unwrap()
}

/// What `kubectl kustomize deploy/overlays/OVERLAY` renders.
fn kustomize(overlay: &str) -> Vec<serde_yaml::Value> {
    let output = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy().join("overlays").join(overlay))
        .output()
        .expect("kubectl runs (kustomize is built into it)");
    assert!(
        output.status.success(),
        "kubectl kustomize deploy/overlays/{overlay}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    documents(&String::from_utf8(output.stdout).unwrap())
}

/// The one Deployment of `documents`.
fn deployment(documents: &[serde_yaml::Value]) -> Deployment {
    let mut deployments = documents.iter().filter(|document| kind(document) == "Deployment");
    let deployment = deployments.next().expect("a Deployment");
    assert!(deployments.next().is_none(), "one Deployment");
    serde_yaml::from_value(deployment.clone()).unwrap()
}

/// The permissions the Roles and ClusterRoles of `documents` grant.
fn granted(documents: &[serde_yaml::Value]) -> BTreeSet<Permission> {
    let mut granted = BTreeSet::new();
    let mut add = |place: String, rules: Vec<PolicyRule>| {
        for rule in rules {
            let resources: Vec<String> = rule
                .resources
                .clone()
                .unwrap_or_default()
                .into_iter()
                .flat_map(|resource| match &rule.resource_names {
                    None => vec![resource],
                    Some(names) => names.iter().map(|name| format!("{resource}#{name}")).collect(),
                })
                .collect();
            for group in rule.api_groups.unwrap_or_default() {
                for resource in resources.clone() {
                    for verb in &rule.verbs {
                        granted.insert((place.clone(), group.clone(), resource.clone(), verb.clone()));
                    }
                }
            }
        }
    };
    for document in documents {
        match kind(document) {
            "ClusterRole" => {
                let role: ClusterRole = serde_yaml::from_value(document.clone()).unwrap();
                add("*".into(), role.rules.unwrap_or_default());
            }
            "Role" => {
                let role: Role = serde_yaml::from_value(document.clone()).unwrap();
                add(role.metadata.namespace.unwrap(), role.rules.unwrap_or_default());
            }
            _ => {}
        }
    }
    granted
}

/// The plural the API server names a kind by, for the kinds the examples use.
fn plural(kind: &str) -> String {
    match kind {
        "Pod" => "pods",
        "Deployment" => "deployments",
        "HorizontalPodAutoscaler" => "horizontalpodautoscalers",
        "Node" => "nodes",
        "Event" => "events",
        "ConfigMap" => "configmaps",
        "ReplicaSet" => "replicasets",
        // The resource metrics API names its kinds apart from its resources.
        "PodMetrics" => "pods",
        other => panic!("no plural known for {other}: add it here"),
    }
    .to_owned()
}

/// What the example plugins need, from their grants and registrations as
/// `kinformer check` reports them: list and watch on each accepted
/// subscription, each write verb (apply is RBAC's patch) on each written
/// resource, get, list and watch on each Secret and ConfigMap named by
/// `[env]`, and get, create and update on Leases.
fn needed(dir: &Path, cache: &Path) -> BTreeSet<Permission> {
    let engine = PluginEngine::with_options(&EngineOptions {
        cache_dir: Some(cache.to_owned()),
        ..EngineOptions::default()
    })
    .unwrap();
    let mut needed = BTreeSet::new();
    for plugin in kinformer::runtime::plugin_files(dir).unwrap() {
        let report = kinformer_cli::check::check_with(&engine, &plugin, None).unwrap();
        let manifest = Manifest::for_plugin(&plugin).unwrap();
        for subscription in &manifest.grant.review(&report.registration).subscriptions {
            let place = subscription.namespace.clone().unwrap_or_else(|| "*".into());
            for verb in ["list", "watch"] {
                let gvk = &subscription.gvk;
                needed.insert((place.clone(), gvk.group.clone(), plural(&gvk.kind), verb.into()));
            }
        }
        for rule in manifest.grant.writes() {
            assert!(rule.namespaces().is_all(), "the examples write in every namespace");
            for pattern in rule.resources() {
                let api_version = pattern.api_version().unwrap();
                let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
                let resource = match pattern.subresource() {
                    Some(subresource) => format!("{}/{subresource}", plural(pattern.kind().unwrap())),
                    None => plural(pattern.kind().unwrap()),
                };
                for verb in rule.verbs() {
                    let verb = if verb == Verb::Apply { "patch" } else { verb.as_str() };
                    needed.insert(("*".into(), group.into(), resource.clone(), verb.into()));
                }
            }
        }
        for var in &manifest.env {
            let (resource, key) = match &var.value {
                EnvValue::Literal(_) => continue,
                EnvValue::Secret(key) => ("secrets", key),
                EnvValue::ConfigMap(key) => ("configmaps", key),
            };
            for verb in ["get", "list", "watch"] {
                needed.insert((
                    key.namespace.clone(),
                    String::new(),
                    format!("{resource}#{}", key.name),
                    verb.into(),
                ));
            }
        }
    }
    for verb in ["get", "list", "create", "update"] {
        needed.insert((
            "kinformer".into(),
            "coordination.k8s.io".into(),
            "leases".into(),
            verb.into(),
        ));
    }
    needed.extend(api_server_addresses());
    needed
}

/// What every host needs, whatever its plugins: the API server's addresses,
/// refused to plugins' HTTP, followed in `default`.
fn api_server_addresses() -> BTreeSet<Permission> {
    let services = ["get", "list", "watch"].map(|verb| {
        let resource = "services#kubernetes";
        (
            "default".to_owned(),
            String::new(),
            resource.to_owned(),
            verb.to_owned(),
        )
    });
    let slices = ["list", "watch"].map(|verb| {
        let (group, resource) = ("discovery.k8s.io", "endpointslices");
        (
            "default".to_owned(),
            group.to_owned(),
            resource.to_owned(),
            verb.to_owned(),
        )
    });
    services.into_iter().chain(slices).collect()
}

#[test]
fn the_rbac_of_the_examples_matches_their_grants_and_the_deploy_manifests_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    kinformer_cli::demo::write_plugins(dir.path(), plugin_artifacts::ALL).unwrap();
    // Compiled once, then taken from the cache by this and later runs.
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-cache");
    let options = RbacOptions {
        lease_namespace: Some("kinformer".into()),
        cache_dir: Some(cache.clone()),
        ..RbacOptions::default()
    };
    let printed = kinformer_cli::rbac::rbac(dir.path(), &options).unwrap();
    let printed = documents(&printed);

    // Nothing missing, nothing extra.
    let printed_grants = granted(&printed);
    let needed = needed(dir.path(), &cache);
    let missing: Vec<_> = needed.difference(&printed_grants).collect();
    let extra: Vec<_> = printed_grants.difference(&needed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );

    // Each role is bound to the service account.
    let bound: Vec<(&str, &str)> = printed
        .iter()
        .filter(|document| kind(document).ends_with("Binding"))
        .map(|binding| {
            assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
            assert_eq!(binding["subjects"][0]["name"], "kinformer");
            assert_eq!(binding["subjects"][0]["namespace"], "kinformer");
            (kind(binding), binding["roleRef"]["kind"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        bound,
        [
            ("ClusterRoleBinding", "ClusterRole"),
            ("RoleBinding", "Role"),
            ("RoleBinding", "Role"),
            ("RoleBinding", "Role")
        ],
        "the API server's Service in default, the Leases' namespace, and notifier's Secret's"
    );

    // deploy/base/rbac.yaml is what `kinformer rbac` prints.
    let shipped = documents(&std::fs::read_to_string(deploy().join("base/rbac.yaml")).unwrap());
    assert_eq!(
        shipped, printed,
        "deploy/base/rbac.yaml differs from `kinformer rbac --plugins DIR --leader-elect` for the examples"
    );

    // One replica: no leader election, as the service account the RBAC
    // binds, probed, restricted, every example plugin mounted.
    let single = kustomize("single");
    let kinds: Vec<&str> = single.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "Role",
            "Role",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "RoleBinding",
            "RoleBinding",
            "ClusterRoleBinding",
            "Service",
            "Deployment"
        ]
    );
    assert_eq!(
        granted(&single),
        printed_grants,
        "the overlay's RBAC is the printed one"
    );
    let single_spec = deployment(&single).spec;
    assert_eq!(single_spec.replicas, Some(1));
    let pod = single_spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("kinformer"));
    assert_eq!(pod.security_context.unwrap().run_as_non_root, Some(true));
    let container = &pod.containers[0];
    let args = container.args.clone().unwrap();
    assert!(!args.iter().any(|arg| arg.starts_with("--leader-elect")), "{args:?}");
    assert!(args.iter().any(|arg| arg == "--plugins=/plugins"));
    assert!(args.iter().any(|arg| arg == "--cache-dir=/cache"));
    let env: Vec<&str> = container.env.iter().flatten().map(|env| env.name.as_str()).collect();
    assert_eq!(env, ["POD_NAME", "POD_NAMESPACE"], "the Lease's identity and namespace");
    let probe = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .and_then(|probe| probe.http_get.as_ref())
            .and_then(|get| get.path.clone())
    };
    assert_eq!(probe(&container.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(probe(&container.readiness_probe).as_deref(), Some("/readyz"));
    let security = container.security_context.clone().unwrap();
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.capabilities.unwrap().drop, Some(vec!["ALL".to_owned()]));
    let volumes = pod.volumes.unwrap();
    let mounted: Vec<String> = volumes
        .iter()
        .filter_map(|volume| volume.projected.as_ref())
        .flat_map(|projected| projected.sources.iter().flatten())
        .filter_map(|source| source.config_map.as_ref().map(|map| map.name.clone()))
        .collect();
    let examples: Vec<String> = plugin_artifacts::ALL
        .iter()
        .map(|(file, _)| format!("kinformer-plugin-{}", file.trim_end_matches(".wasm")))
        .collect();
    assert_eq!(mounted, examples);
    assert!(
        volumes
            .iter()
            .any(|volume| volume.name == "cache" && volume.empty_dir.is_some())
    );
    let service = single.iter().find(|document| kind(document) == "Service").unwrap();
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");

    // HA: three replicas electing per plugin, spread over nodes, two kept
    // through a drain; otherwise the same pod.
    let ha = kustomize("ha");
    let ha_spec = deployment(&ha).spec;
    assert_eq!(ha_spec.replicas, Some(3));
    let ha_pod = ha_spec.template.spec.unwrap();
    let ha_args = ha_pod.containers[0].args.clone().unwrap();
    assert_eq!(
        ha_args[args.len()..],
        [
            "--leader-elect",
            "--leader-elect-mode=per-plugin",
            "--lease-name=kinformer"
        ]
    );
    assert_eq!(ha_args[..args.len()], args[..]);
    let spread = &ha_pod.topology_spread_constraints.unwrap()[0];
    assert_eq!(spread.topology_key, "kubernetes.io/hostname");
    let budget = ha
        .iter()
        .find(|document| kind(document) == "PodDisruptionBudget")
        .unwrap();
    assert_eq!(budget["spec"]["minAvailable"], 2);
    let labels = ha_spec.template.metadata.unwrap().labels.unwrap();
    let selected = budget["spec"]["selector"]["matchLabels"].as_mapping().unwrap();
    assert!(!selected.is_empty());
    for (key, value) in selected {
        assert_eq!(labels.get(key.as_str().unwrap()).map(String::as_str), value.as_str());
    }
    assert!(
        granted(&ha)
            .iter()
            .any(|(_, group, resource, _)| group == "coordination.k8s.io" && resource == "leases"),
        "the replicas may take Leases"
    );

    // Plugins from an OCI artifact: the same host container as HA's, its
    // /plugins an emptyDir that an ORAS sidecar fills by renames (so a
    // reader never sees half a file), started first.
    let oci = kustomize("oci");
    let oci_pod = deployment(&oci).spec.template.spec.unwrap();
    assert_eq!(
        oci_pod.containers, ha_pod.containers,
        "the host container differs from the ha overlay's"
    );
    let sidecar = &oci_pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"), "a native sidecar");
    let image = sidecar.image.as_deref().unwrap();
    assert!(image.starts_with("ghcr.io/oras-project/oras:v"), "{image}");
    assert!(
        sidecar.startup_probe.is_some(),
        "the host starts once the first pull is in"
    );
    let script = sidecar.command.as_ref().unwrap().join(" ");
    assert!(script.contains("oras pull") && script.contains("mv "), "{script}");
    let mounts = sidecar.volume_mounts.as_ref().unwrap();
    assert!(
        mounts
            .iter()
            .any(|mount| mount.name == "plugins" && mount.mount_path == "/plugins" && mount.read_only != Some(true))
    );
    let oci_volumes = oci_pod.volumes.unwrap();
    let plugins = oci_volumes.iter().find(|volume| volume.name == "plugins").unwrap();
    assert!(
        plugins.empty_dir.is_some() && plugins.projected.is_none(),
        "{plugins:?}"
    );
    let security = sidecar.security_context.clone().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
}

/// The OCI sidecar's script, run with a stand-in `oras` that serves a local
/// directory as the artifact: each pushed version lands in the plugin
/// directory, changed files by rename, dropped files removed, and an
/// unchanged digest pulls nothing.
#[test]
fn the_oci_sidecar_publishes_each_version_by_renames_and_drops_what_left() {
    let pod = deployment(&kustomize("oci")).spec.template.spec.unwrap();
    let sidecar = &pod.init_containers.unwrap()[0];
    let script = sidecar.command.as_ref().unwrap()[2].clone();

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["bin", "artifact", "plugins", "sync"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    // `oras manifest fetch --descriptor REF` prints the digest in `digest`;
    // `oras pull --no-tty --output DIR REF@DIGEST` copies the artifact and
    // counts the pulls.
    let fake = format!(
        "#!/bin/sh\n\
         case \"$1 $2\" in\n\
         'manifest fetch') printf '{{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"%s\",\"size\":9}}\\n' \"$(cat {d}/digest)\" ;;\n\
         'pull --no-tty') echo \"$5\" >> {d}/pulls; cp {d}/artifact/* \"$4\"/ ;;\n\
         *) exit 2 ;;\n\
         esac\n",
        d = d.display()
    );
    let oras = d.join("bin/oras");
    std::fs::write(&oras, fake).unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&oras)
        .status()
        .unwrap();
    let publish = |digest: &str, files: &[(&str, &str)]| {
        for entry in std::fs::read_dir(d.join("artifact")).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        for (name, text) in files {
            std::fs::write(d.join("artifact").join(name), text).unwrap();
        }
        std::fs::write(d.join("digest"), digest).unwrap();
    };
    let plugins = || -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = std::fs::read_dir(d.join("plugins"))
            .unwrap()
            .map(|entry| {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&path).unwrap_or_default())
            })
            .collect();
        files.sort();
        files
    };
    // Polls until `done`, for at most 10 s; `failure` says what was seen.
    let until = |done: &dyn Fn() -> bool, failure: &dyn Fn() -> String| {
        let started = std::time::Instant::now();
        while !done() {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "{}", failure());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let wait_for = |expected: &[(&str, &str)]| {
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(name, text)| ((*name).to_owned(), (*text).to_owned()))
            .collect();
        until(&|| plugins() == expected, &|| format!("{:?}", plugins()));
    };

    publish(
        "sha256:aa",
        &[("a.toml", "config = 1"), ("a.wasm", "one"), ("b.wasm", "two")],
    );
    let path = format!(
        "{}:{}",
        d.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut sidecar = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("PATH", path)
        .env("PLUGINS_ARTIFACT", "registry.example.com:5000/team/plugins:stable")
        .env("PLUGINS_DIR", d.join("plugins"))
        .env("SYNC_DIR", d.join("sync"))
        .env("TMPDIR", d.join("sync"))
        .env("SYNC_SECONDS", "0.05")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&[("a.toml", "config = 1"), ("a.wasm", "one"), ("b.wasm", "two")]);
    // The sidecar touches the startup probe's file once the first version
    // is in place: just after its last rename.
    until(&|| d.join("sync/ready").exists(), &|| {
        "the startup probe's file".to_owned()
    });
    let modified = |name: &str| {
        std::fs::metadata(d.join("plugins").join(name))
            .unwrap()
            .modified()
            .unwrap()
    };
    let untouched = modified("a.toml");

    // A new version: a.wasm changed, b.wasm dropped, c.wasm added.
    publish(
        "sha256:bb",
        &[("a.toml", "config = 1"), ("a.wasm", "ONE"), ("c.wasm", "three")],
    );
    wait_for(&[("a.toml", "config = 1"), ("a.wasm", "ONE"), ("c.wasm", "three")]);
    assert_eq!(modified("a.toml"), untouched, "an unchanged file is not rewritten");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = sidecar.kill();
    let _ = sidecar.wait();
    let pulls = std::fs::read_to_string(d.join("pulls")).unwrap();
    assert_eq!(
        pulls.lines().collect::<Vec<_>>(),
        [
            "registry.example.com:5000/team/plugins@sha256:aa",
            "registry.example.com:5000/team/plugins@sha256:bb"
        ],
        "one pull per digest, by digest"
    );
}

/// Each overlay, rendered, passes a server-side dry run on the emulated API
/// server: every object is one the server knows and accepts. The emulation
/// serves no PodDisruptionBudget and no OpenAPI yet: that kind alone may be
/// unknown to it, and only that way, and kubectl's own validation is skipped
/// only when it cannot download the OpenAPI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_overlay_passes_a_server_side_dry_run() {
    let server = apiserver_sim::ApiServer::start(apiserver_sim::SimConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let kubectl = move |args: Vec<String>, input: String| {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || {
            use std::io::Write as _;
            let mut child = std::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(&args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("kubectl runs");
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
            let output = child.wait_with_output().unwrap();
            (
                output.status.success(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        })
    };
    // A dry run creates nothing: the namespace the objects go in is made
    // for real first, as the first apply would, and `monitoring`, where the
    // example notifier's Secret lives, exists as on the cluster it is for.
    for namespace in ["kinformer", "monitoring"] {
        let (created, _, stderr) = kubectl(
            ["create", "namespace", namespace].map(str::to_owned).to_vec(),
            String::new(),
        )
        .await
        .unwrap();
        assert!(created, "{stderr}");
    }
    let mut unserved = Vec::new();
    let mut unvalidated = 0;
    for overlay in ["single", "ha", "oci", "tenants"] {
        for document in kustomize(overlay) {
            let name = format!(
                "{overlay}: {} {}",
                kind(&document),
                document["metadata"]["name"].as_str().unwrap()
            );
            let apply = |validate: &str| {
                let args = [
                    "apply",
                    "--server-side",
                    "--dry-run=server",
                    "--field-manager=kinformer-deploy-test",
                    validate,
                    "-o",
                    "name",
                    "-f",
                    "-",
                ];
                kubectl(
                    args.map(str::to_owned).to_vec(),
                    serde_yaml::to_string(&document).unwrap(),
                )
            };
            let (mut applied, mut stdout, mut stderr) = apply("--validate=strict").await.unwrap();
            // kubectl validates against the server's OpenAPI, which the
            // emulation does not serve yet: then the server alone judges.
            if !applied && stderr.contains("failed to download openapi") {
                unvalidated += 1;
                (applied, stdout, stderr) = apply("--validate=false").await.unwrap();
            }
            if applied {
                assert!(!stdout.trim().is_empty(), "{name}: applied nothing");
                continue;
            }
            let unknown = format!("no matches for kind \"{}\"", kind(&document));
            assert!(
                kind(&document) == "PodDisruptionBudget" && stderr.contains(&unknown),
                "{name} failed the server's dry run: {stderr}"
            );
            unserved.push(name);
        }
    }
    // Say what was not checked, so that it is seen once the emulation
    // serves it.
    if !unserved.is_empty() {
        eprintln!("not served by the emulation, so not dry-run: {unserved:?}");
    }
    if unvalidated > 0 {
        eprintln!(
            "{unvalidated} objects dry-run without kubectl's OpenAPI validation: the emulation serves no OpenAPI"
        );
    }
}

/// `kinformer crds` prints the CRDs `deploy/crds` carries, the tenants
/// overlay's RBAC for Handlers is what `kinformer rbac --handlers` adds, and
/// every overlay carries the Role in `default` that `kinformer rbac` prints
/// with or without Handlers, for any plugins: the API server's addresses.
#[test]
fn kinformer_crds_prints_the_deployed_crds_and_rbac_handlers_the_tenants_overlays_rules() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kinformer"))
        .arg("crds")
        .output()
        .expect("kinformer runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let printed = documents(&String::from_utf8(output.stdout).unwrap());
    let shipped = documents(&std::fs::read_to_string(deploy().join("crds/handlers.yaml")).unwrap());
    assert_eq!(printed, shipped);
    let kinds: Vec<&str> = printed
        .iter()
        .map(|crd| crd["spec"]["names"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Handler", "ClusterHandler"]);

    // Only what Handlers need: no plugin in the directory.
    let empty = tempfile::tempdir().unwrap();
    let options = RbacOptions {
        handlers: Some(Vec::new()),
        ..RbacOptions::default()
    };
    let printed = documents(&kinformer_cli::rbac::rbac(empty.path(), &options).unwrap());
    let rules = |documents: &[serde_yaml::Value]| -> BTreeSet<String> {
        let role = documents
            .iter()
            .find(|document| kind(document) == "ClusterRole")
            .unwrap();
        let role = ClusterRole::deserialize(role.clone()).unwrap();
        let mut rules = BTreeSet::new();
        for rule in role.rules.unwrap() {
            for group in rule.api_groups.unwrap_or_default() {
                for resource in rule.resources.clone().unwrap_or_default() {
                    for verb in &rule.verbs {
                        rules.insert(format!("{group}/{resource}:{verb}"));
                    }
                }
            }
        }
        rules
    };
    let shipped = documents(&std::fs::read_to_string(deploy().join("overlays/tenants/handlers-rbac.yaml")).unwrap());
    assert_eq!(rules(&printed), rules(&shipped));
    assert!(rules(&shipped).contains("/serviceaccounts:impersonate"));

    // The API server's addresses, with and without Handlers and whatever
    // the plugins: every host follows them. Each overlay carries them.
    let in_default = |documents: &[serde_yaml::Value]| -> BTreeSet<Permission> {
        granted(documents)
            .into_iter()
            .filter(|(place, ..)| place == "default")
            .collect()
    };
    assert_eq!(in_default(&printed), api_server_addresses());
    let without_handlers = documents(&kinformer_cli::rbac::rbac(empty.path(), &RbacOptions::default()).unwrap());
    assert_eq!(granted(&without_handlers), api_server_addresses());
    let bound: Vec<&str> = without_handlers.iter().map(kind).collect();
    assert_eq!(bound, ["Role", "RoleBinding"]);
    assert_eq!(without_handlers[1]["metadata"]["namespace"], "default");
    for overlay in ["single", "ha", "oci", "tenants"] {
        let rendered = kustomize(overlay);
        let missing: Vec<_> = api_server_addresses()
            .difference(&in_default(&rendered))
            .cloned()
            .collect();
        assert!(missing.is_empty(), "deploy/overlays/{overlay} lacks {missing:?}");
    }
}
