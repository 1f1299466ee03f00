//! kubectl with its default validation: the OpenAPI documents it downloads, the writes it validates with them, `kubectl explain`, and a Helm-rendered chart applied twice.

use std::path::Path;

use apiserver_sim::SimConfig;
use apiserver_sim::store::ResourceId;

use crate::support::{example_crd, kubectl, kubectl_output, kubectl_run, raw, start};

/// A chart as `helm template` renders one: the objects of a web app with a
/// disruption budget and an admission webhook.
const CHART: &str = r#"---
# Source: web/templates/serviceaccount.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
  labels:
    app.kubernetes.io/name: web
    app.kubernetes.io/instance: web
    app.kubernetes.io/managed-by: Helm
    helm.sh/chart: web-1.2.0
---
# Source: web/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  labels:
    app.kubernetes.io/name: web
data:
  LOG_LEVEL: "info"
  config.yaml: |
    listen: ":8080"
---
# Source: web/templates/role.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: web
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get", "list", "watch"]
---
# Source: web/templates/rolebinding.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: web
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: web
subjects:
  - kind: ServiceAccount
    name: web
    namespace: default
---
# Source: web/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app.kubernetes.io/name: web
spec:
  type: ClusterIP
  ports:
    - port: 80
      targetPort: http
      protocol: TCP
      name: http
  selector:
    app.kubernetes.io/name: web
---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app.kubernetes.io/name: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app.kubernetes.io/name: web
  template:
    metadata:
      labels:
        app.kubernetes.io/name: web
    spec:
      serviceAccountName: web
      securityContext:
        runAsNonRoot: true
      containers:
        - name: web
          image: "registry.example/web:1.2.0"
          imagePullPolicy: IfNotPresent
          ports:
            - name: http
              containerPort: 8080
              protocol: TCP
          envFrom:
            - configMapRef:
                name: web-config
          livenessProbe:
            httpGet:
              path: /healthz
              port: http
          readinessProbe:
            httpGet:
              path: /ready
              port: http
          resources:
            limits:
              memory: 128Mi
            requests:
              cpu: 100m
              memory: 64Mi
---
# Source: web/templates/pdb.yaml
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
spec:
  minAvailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: web
---
# Source: web/templates/webhook.yaml
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: web-validate
webhooks:
  - name: validate.web.example.com
    admissionReviewVersions: ["v1"]
    sideEffects: None
    clientConfig:
      service:
        name: web
        namespace: default
        path: /validate
    rules:
      - apiGroups: ["apps"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["deployments"]
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("the manifest is written");
    path.display().to_string()
}

#[tokio::test]
async fn the_openapi_documents_name_every_kind_and_each_group_versions_document() {
    let (server, _client) = start(SimConfig::default().controllers(false)).await;
    let index = raw(&server, "GET", "/openapi/v3", "application/json", "").await.json();
    let url = index["paths"]["apis/policy/v1"]["serverRelativeURL"]
        .as_str()
        .expect("policy/v1 has a document");
    let document = raw(&server, "GET", url, "application/json", "").await.json();
    let pdb = &document["components"]["schemas"]["io.k8s.api.policy.v1.PodDisruptionBudget"];
    assert_eq!(pdb["x-kubernetes-group-version-kind"][0]["kind"], "PodDisruptionBudget");
    let v2 = raw(&server, "GET", "/openapi/v2", "application/json", "").await.json();
    assert_eq!(v2["swagger"], "2.0");
    assert!(v2["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_chart_applies_with_default_validation_and_a_second_apply_changes_nothing() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default().controllers(false)).await;
    let dir = tempfile::tempdir().unwrap();
    let chart = write(dir.path(), "chart.yaml", CHART);
    let first = kubectl_run(&server, dir.path(), &["apply", "-f", &chart]).await;
    for created in [
        "serviceaccount/web created",
        "configmap/web-config created",
        "role.rbac.authorization.k8s.io/web created",
        "rolebinding.rbac.authorization.k8s.io/web created",
        "service/web created",
        "deployment.apps/web created",
        "poddisruptionbudget.policy/web created",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/web-validate created",
    ] {
        assert!(first.contains(created), "{created} missing from:\n{first}");
    }
    let rv = server.store().resource_version();
    let second = kubectl_run(&server, dir.path(), &["apply", "-f", &chart]).await;
    // kubectl sends the webhook's `rules` again, an atomic list the server
    // defaults (`scope: "*"`), as it does to kube-apiserver; the server
    // finds nothing to change.
    assert!(second.matches("unchanged").count() >= 7, "{second}");
    assert_eq!(
        server.store().resource_version(),
        rv,
        "the second apply wrote:\n{second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_writes_with_default_validation_and_the_server_refuses_unknown_fields() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default().controllers(false)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    let configmap =
        |mode: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: {mode}\n");
    let created = write(path, "create.yaml", &configmap("fast"));
    assert!(
        kubectl_run(&server, path, &["create", "-f", &created])
            .await
            .contains("created")
    );
    let replaced = write(path, "replace.yaml", &configmap("safe"));
    assert!(
        kubectl_run(&server, path, &["replace", "-f", &replaced])
            .await
            .contains("replaced")
    );
    let forced = kubectl_run(&server, path, &["replace", "--force", "-f", &replaced]).await;
    assert!(forced.contains("replaced"), "{forced}");
    let applied = write(path, "apply.yaml", &configmap("slow"));
    // `replace` made kubectl-replace the field's manager: the apply takes it over.
    let server_side = kubectl_run(
        &server,
        path,
        &["apply", "--server-side", "--force-conflicts", "-f", &applied],
    )
    .await;
    assert!(server_side.contains("serverside-applied"), "{server_side}");
    let configmaps = ResourceId::new("", "v1", "configmaps");
    let stored = server.store().get(&configmaps, Some("default"), "settings").unwrap();
    assert_eq!(stored.value["data"]["mode"], "slow");

    // `kubectl edit` with an editor that changes the data.
    let editor = write(
        path,
        "editor.sh",
        "#!/bin/sh\nsed -i 's/mode: slow/mode: edited/' \"$1\"\n",
    );
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let edit = tokio::task::spawn_blocking({
        let kubeconfig = path.join("kubeconfig");
        let cache = path.join("cache");
        let editor = editor.clone();
        move || {
            std::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .arg("--cache-dir")
                .arg(&cache)
                .args(["edit", "configmap", "settings"])
                .env("KUBE_EDITOR", &editor)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(edit.status.success(), "{}", String::from_utf8_lossy(&edit.stderr));
    let stored = server.store().get(&configmaps, Some("default"), "settings").unwrap();
    assert_eq!(stored.value["data"]["mode"], "edited");

    // A misspelt field is refused by the server, in kube-apiserver's words.
    let typo = write(
        path,
        "typo.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\ndatum:\n  mode: fast\n",
    );
    let refused = kubectl_output(&server, path, &["apply", "-f", &typo]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("strict decoding error: unknown field \"datum\""),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explains_built_in_kinds_and_custom_resources() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default().controllers(false)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    let explained = kubectl_run(&server, path, &["explain", "deployment.spec.strategy"]).await;
    assert!(explained.contains("KIND:       Deployment"), "{explained}");
    assert!(explained.contains("rollingUpdate"), "{explained}");
    let crd = example_crd(
        "Widget",
        "widgets",
        serde_json::json!({"type": "object", "description": "What a widget should be.",
                           "properties": {"size": {"type": "integer", "description": "How big the widget is."}}}),
    );
    let crd = write(path, "crd.json", &crd.to_string());
    kubectl_run(&server, path, &["apply", "-f", &crd]).await;
    let explained = kubectl_run(&server, path, &["explain", "widgets.spec"]).await;
    assert!(explained.contains("How big the widget is."), "{explained}");
    let widget = write(
        path,
        "widget.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 3\n",
    );
    assert!(
        kubectl_run(&server, path, &["apply", "-f", &widget])
            .await
            .contains("created")
    );
}
