//! The official Python `kubernetes` client against the emulated server: the
//! calls a controller written in Python makes (CRUD, conflicts, selectors,
//! watch, scale, strategic merge patches, the dynamic client's discovery)
//! behave as against kube-apiserver.
//!
//! The client is installed, pinned, into a virtualenv under the workspace's
//! `target/` the first time; without `python3` or the package registry the
//! test skips with the reason printed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use apiserver_sim::{ApiServer, SimConfig};
use tokio::process::Command;

/// The client release for Kubernetes 1.36, the version the emulation follows.
const CLIENT_VERSION: &str = "36.0.3";

/// The scenarios' steps, each printed as `ok STEP` when it passed.
const STEPS: [&str; 11] = [
    "version",
    "namespaces",
    "create and read",
    "patch",
    "conflict",
    "label selector",
    "not found",
    "watch",
    "deployment and scale",
    "dynamic client",
    "delete namespace",
];

/// The virtualenv's `python`, with the pinned client installed; `None` with
/// the reason printed when it cannot be made.
async fn python() -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    let venv = target.join("test-toolchains/python-kubernetes");
    let python = venv.join("bin/python");
    let installed = |python: PathBuf| async move {
        let check = format!("import kubernetes, sys; sys.exit(kubernetes.__version__ != {CLIENT_VERSION:?})");
        Command::new(&python)
            .args(["-c", &check])
            .status()
            .await
            .is_ok_and(|status| status.success())
    };
    if installed(python.clone()).await {
        return Some(python);
    }
    let made = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(&venv)
        .status()
        .await
        .is_ok_and(|status| status.success());
    let pip = made
        && Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("kubernetes=={CLIENT_VERSION}"))
            .status()
            .await
            .is_ok_and(|status| status.success());
    if pip && installed(python.clone()).await {
        return Some(python);
    }
    println!(
        "skipped: could not install kubernetes=={CLIENT_VERSION} into {}",
        venv.display()
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_works_as_against_kube_apiserver() {
    let Some(python) = python().await else { return };
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_scenarios.py");
    let run = Command::new(python)
        .arg(script)
        .env("KUBECONFIG", &kubeconfig)
        .kill_on_drop(true)
        .output();
    // The script's own watch ends after 10 s; a hang beyond that is a failure.
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the scenarios finish")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let passed: Vec<&str> = stdout.lines().filter_map(|line| line.strip_prefix("ok ")).collect();
    assert!(
        output.status.success() && passed == STEPS,
        "passed {passed:?} of {STEPS:?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
