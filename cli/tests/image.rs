//! The container image, built and run as an operator would: built without a
//! daemon by `deploy/build-image` (a static binary in a `scratch` image),
//! inspected with skopeo, then run with podman on the host's network against
//! the emulated API server, as a random non-root UID on a read-only root
//! filesystem with no `/tmp`, a plugin mounted read-only and the compile cache
//! where it is told. It gets ready, handles deltas and exits cleanly on
//! SIGTERM.
//!
//! Needs buildah, podman, skopeo, Debian's musl-tools and the musl target
//! (`.ci/run` installs them); runs in CI (`CI` set) or when
//! `KINFORMER_IMAGE_TEST` is set, and says so and passes otherwise.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use apiserver_sim::{ApiServer, SimConfig};

/// The image's compressed size may not pass this.
const MAX_COMPRESSED: u64 = 40 << 20;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn wanted() -> bool {
    if std::env::var_os("CI").is_some() || std::env::var_os("KINFORMER_IMAGE_TEST").is_some() {
        return true;
    }
    eprintln!("the image test builds a release binary and needs podman: set KINFORMER_IMAGE_TEST=1 to run it");
    false
}

fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// A JSON file of an OCI layout, by digest.
fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// podman on the test's own storage, without systemd, with runc (crun
/// refuses the hybrid cgroup hierarchies some machines have).
fn podman(storage: &Path) -> Command {
    let mut command = Command::new("podman");
    command
        .arg("--root")
        .arg(storage.join("root"))
        .arg("--runroot")
        .arg(storage.join("run"))
        .args(["--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"])
        .args(["--events-backend", "file", "--runtime", "runc"]);
    command
}

/// `--ulimit` flags within this process's own hard limits: podman's
/// defaults (a million open files) cannot be set without CAP_SYS_RESOURCE.
fn ulimits() -> Vec<String> {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let hard = |name: &str, at_most: u64| {
        let line = limits.lines().find(|line| line.starts_with(name)).unwrap();
        let value = line[name.len()..].split_whitespace().nth(1).unwrap();
        value.parse().map_or(at_most, |hard: u64| hard.min(at_most))
    };
    let (files, processes) = (hard("Max open files", 65_536), hard("Max processes", 32_768));
    vec![
        format!("--ulimit=nofile={files}:{files}"),
        format!("--ulimit=nproc={processes}:{processes}"),
    ]
}

/// GET `path` on loopback `port`: the status code, or `None` while nothing
/// answers.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())?;
    Some((code, body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_builds_small_and_runs_read_only_as_any_user_against_the_emulation() {
    if !wanted() {
        return;
    }
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image");
    let storage = work.join("storage");
    let layout = work.join("layout");
    std::fs::create_dir_all(&work).unwrap();
    let tag = "localhost/kinformer:test";

    // Built as the docs say, into the test's own storage and an OCI layout;
    // the binary at opt-level 1 rather than the profile's 2, which saves CI
    // minutes and changes nothing this test checks (the shipped image's size
    // in the docs is measured at the profile's own level). CI builds that
    // binary once, with its lints, and names it in KINFORMER_IMAGE_BINARY.
    let built = Instant::now();
    let mut build = Command::new(root().join("deploy/build-image"));
    build
        .arg(tag)
        .env("CARGO_PROFILE_IMAGE_OPT_LEVEL", "1")
        .env("IMAGE_STORAGE_ROOT", &storage)
        .env("IMAGE_ARCHIVE", &layout);
    if let Some(binary) = std::env::var_os("KINFORMER_IMAGE_BINARY") {
        build.env("IMAGE_BINARY", binary);
    }
    run(&mut build);
    eprintln!("image built in {:.0?} (the binary's build included)", built.elapsed());

    // Its configuration and annotations.
    let inspected = run(Command::new("skopeo").arg("inspect").arg("--config").arg(format!(
        "containers-storage:[vfs@{}+{}]{tag}",
        storage.join("root").display(),
        storage.join("run").display()
    )));
    let config: serde_json::Value = serde_json::from_slice(&inspected.stdout).unwrap();
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["config"]["Entrypoint"], serde_json::json!(["/kinformer"]));
    let revision = String::from_utf8(run(Command::new("git").arg("-C").arg(root()).args(["rev-parse", "HEAD"])).stdout)
        .unwrap()
        .trim()
        .to_owned();
    let index = json(&layout.join("index.json"));
    let manifest = json(&blob(&layout, index["manifests"][0]["digest"].as_str().unwrap()));
    for annotations in [&manifest["annotations"], &config["config"]["Labels"]] {
        assert_eq!(
            annotations["org.opencontainers.image.version"],
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(annotations["org.opencontainers.image.revision"], revision.as_str());
        assert_eq!(
            annotations["org.opencontainers.image.source"],
            "https://github.com/kinformer/kinformer"
        );
    }

    // The binary and the CA certificates, nothing else (no shell), within
    // the size budget.
    let layers = manifest["layers"].as_array().unwrap();
    let compressed: u64 = layers.iter().map(|layer| layer["size"].as_u64().unwrap()).sum();
    let mut files = Vec::new();
    for layer in layers {
        let listed = run(Command::new("tar")
            .arg("-tzf")
            .arg(blob(&layout, layer["digest"].as_str().unwrap())));
        files.extend(
            String::from_utf8(listed.stdout)
                .unwrap()
                .lines()
                .filter(|line| !line.ends_with('/'))
                .map(str::to_owned),
        );
    }
    files.sort();
    assert_eq!(files, ["etc/ssl/certs/ca-certificates.crt", "kinformer"]);
    eprintln!(
        "image: {:.1} MiB compressed (at most {} MiB)",
        compressed as f64 / f64::from(1 << 20),
        MAX_COMPRESSED >> 20
    );
    assert!(compressed <= MAX_COMPRESSED, "{compressed} bytes compressed");

    // Run against the emulation with a plugin, read-only, as a random user.
    let server = ApiServer::start(SimConfig::default()).await.unwrap();
    let _churn = server
        .start_workload(
            &apiserver_sim::workload::Workload::default()
                .seed(2)
                .size(1, 1, 2)
                .changes_per_second(5.0),
        )
        .unwrap();
    let plugins = work.join("plugins");
    let cache = work.join("cache");
    for dir in [&plugins, &cache] {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(plugins.join("pods.wasm"), plugin_artifacts::DELTA_LOGGER).unwrap();
    std::fs::write(plugins.join("pods.toml"), "config = \"v1/Pod\"\n").unwrap();
    std::fs::write(work.join("kubeconfig"), server.kubeconfig_with_token("host")).unwrap();
    // The cache belongs to nobody in particular: writable by the random user.
    run(Command::new("chmod").arg("0777").arg(&cache));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let uid = 10_000 + nanos % 50_000;
    let name = format!("kinformer-test-{}", std::process::id());
    let mount = |from: &Path, to: &str, mode: &str| format!("{}:{to}:{mode}", from.display());
    let started = Instant::now();
    run(podman(&storage)
        .args(["run", "--detach", "--name", &name, "--network", "host"])
        .args(ulimits())
        .args(["--read-only", "--read-only-tmpfs=false", "--cap-drop", "ALL"])
        .args(["--security-opt", "no-new-privileges"])
        .arg(format!("--user={uid}:{uid}"))
        .arg("--volume")
        .arg(mount(&plugins, "/plugins", "ro"))
        .arg("--volume")
        .arg(mount(&work.join("kubeconfig"), "/kubeconfig", "ro"))
        .arg("--volume")
        .arg(mount(&cache, "/cache", "rw"))
        .arg(tag)
        .args([
            "run",
            "--plugins",
            "/plugins",
            "--kubeconfig",
            "/kubeconfig",
            "--cache-dir",
            "/cache",
        ])
        .arg(format!("--status-addr=127.0.0.1:{port}")));
    let logs = || {
        let output = podman(&storage).args(["logs", &name]).output().unwrap();
        String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout)
    };
    let stop = || {
        let _ = podman(&storage).args(["rm", "--force", "--time", "0", &name]).output();
    };
    let mut ready = false;
    while started.elapsed() < Duration::from_secs(120) {
        if get(port, "/readyz").is_some_and(|(code, _)| code == 200) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let to_ready = started.elapsed();
    if !ready {
        let text = logs();
        stop();
        panic!("never ready:\n{text}");
    }
    eprintln!("start to ready: {to_ready:.1?} (podman run to /readyz 200, the plugin compiled on a cold cache)");

    // Deltas reach the plugin.
    let mut deltas = 0;
    for _ in 0..600 {
        let (_, body) = get(port, "/plugins").unwrap_or_default();
        deltas = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|plugins| plugins[0]["deltas"].as_u64())
            .unwrap_or(0);
        if deltas > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if deltas == 0 {
        let text = logs();
        stop();
        panic!("no delta handled:\n{text}");
    }
    // The user's identity and the filesystem, from inside: the container's
    // process runs as the random UID, with nothing writable but the cache.
    let inspect = run(podman(&storage).args(["inspect", "--format", "{{.State.Pid}}", &name]));
    let pid = String::from_utf8(inspect.stdout).unwrap().trim().to_owned();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|line| line.starts_with("Uid:")).unwrap();
    assert!(
        uid_line.split_whitespace().nth(1) == Some(&uid.to_string()),
        "{uid_line}"
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mounts")).unwrap();
    let root_mount = mounts.lines().find(|line| line.split(' ').nth(1) == Some("/")).unwrap();
    assert!(
        root_mount
            .split(' ')
            .nth(3)
            .unwrap()
            .split(',')
            .any(|option| option == "ro"),
        "{root_mount}"
    );
    assert!(
        !mounts.lines().any(|line| line.split(' ').nth(1) == Some("/tmp")),
        "a /tmp is mounted:\n{mounts}"
    );
    let cached = std::fs::read_dir(&cache).unwrap().count();
    assert!(cached > 0, "nothing compiled into the cache it was told");

    // SIGTERM: a clean exit, soon.
    run(podman(&storage).args(["kill", "--signal", "TERM", &name]));
    let waited = run(podman(&storage).args(["wait", &name]));
    let code = String::from_utf8(waited.stdout).unwrap().trim().to_owned();
    let text = logs();
    stop();
    assert_eq!(code, "0", "exit code after SIGTERM:\n{text}");
    assert!(text.contains("stopping"), "{text}");
}
