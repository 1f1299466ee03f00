//! `kinformer` compiles each new component in a child process of its own
//! program, into the compile cache, and loads it from there; a component
//! compiled before loads without a child.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `kinformer replay PLUGIN` on an empty recording, caching in `cache`.
fn replay(plugin: &Path, cache: &Path) -> Output {
    let recording = plugin.with_extension("jsonl");
    std::fs::write(&recording, "").expect("an empty recording");
    Command::new(env!("CARGO_BIN_EXE_kinformer"))
        .arg("replay")
        .arg(plugin)
        .arg(&recording)
        .arg("--cache-dir")
        .arg(cache)
        .output()
        .expect("kinformer runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn markers(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("kinformer-compiled")).map_or(0, Iterator::count)
}

#[test]
fn a_new_component_compiles_in_a_child_process_and_then_loads_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let plugin = dir.path().join("delta-logger.wasm");
    std::fs::write(&plugin, plugin_artifacts::DELTA_LOGGER).unwrap();

    let first = replay(&plugin, &cache);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("compiling plugin in a separate process"),
        "{}",
        stderr(&first)
    );
    assert_eq!(markers(&cache), 1, "the compile is noted beside the cache");

    let second = replay(&plugin, &cache);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(!stderr(&second).contains("compiling plugin"), "{}", stderr(&second));
    assert!(stderr(&second).contains("cached=true"), "{}", stderr(&second));
    assert_eq!(markers(&cache), 1);
}

#[test]
fn a_cache_directory_given_relative_to_where_the_command_runs_works() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("delta-logger.wasm"), plugin_artifacts::DELTA_LOGGER).unwrap();
    // As a user types it: `kinformer check --cache-dir cache delta-logger.wasm`.
    let check = || {
        Command::new(env!("CARGO_BIN_EXE_kinformer"))
            .current_dir(dir.path())
            .args(["check", "--cache-dir", "cache", "delta-logger.wasm"])
            .output()
            .expect("kinformer runs")
    };
    let first = check();
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(
        markers(&dir.path().join("cache")),
        1,
        "the cache is under the working directory"
    );
    // The second check loads from the cache: no compile.
    let second = check();
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(!stderr(&second).contains("compiling plugin"), "{}", stderr(&second));
}

#[test]
fn a_component_that_does_not_compile_reports_the_compilers_error_and_is_not_noted() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let plugin = dir.path().join("broken.wasm");
    // A component's header, then nothing a compiler can read.
    std::fs::write(&plugin, b"\0asm\x0d\0\x01\0garbage").unwrap();

    let output = replay(&plugin, &cache);
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(error.contains("not a loadable WebAssembly component"), "{error}");
    assert!(error.contains("compiling plugin in a separate process"), "{error}");
    // The child's own message comes through, not only its exit status.
    assert!(!error.contains("ended with"), "{error}");
    assert_eq!(markers(&cache), 0);
}

#[test]
fn a_compile_process_over_its_time_stops_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kinformer"))
        .env("KINFORMER_COMPILE_INTO", dir.path())
        .env("KINFORMER_COMPILE_TIMEOUT_MS", "1")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The stdin is never closed: the child waits for the rest of the
    // component until its time is up.
    let _stdin = child.stdin.take();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(124));
}

#[test]
fn without_a_compile_cache_components_compile_in_the_hosts_process() {
    use kinformer::plugin::{EngineOptions, PluginEngine};
    // A program that does not exist: a child would fail to start.
    let engine = PluginEngine::with_options(&EngineOptions {
        compile_process: Some("/nonexistent/kinformer".into()),
        cache_dir: None,
        ..EngineOptions::default()
    })
    .unwrap();
    engine
        .load_bytes("delta-logger", plugin_artifacts::DELTA_LOGGER)
        .unwrap();
}
