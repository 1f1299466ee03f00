//! `kinformer new`: the project of each language (a plugin, or a
//! controller), built with the command its README gives, is a component that
//! `kinformer check` accepts with the narrow grant its manifest asks for.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::path::Path;
use std::process::Command;

use kinformer_cli::check::check;
use kinformer_cli::scaffold::{Language, SdkSource, World, build_line, new_plugin};
use kinformer_tests::guest::target_dir;

/// Writes plugin `name` in `language`, of `world`, into a fresh directory,
/// builds it as its README says, and returns the directory.
fn scaffold_and_build(language: Language, world: World, name: &str) -> tempfile::TempDir {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join(name);
    let files = new_plugin(&dir, name, language, world, &SdkSource::detect()).unwrap();
    assert!(files.contains(&dir.join(format!("{name}.toml"))), "{files:#?}");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let line = build_line(language, world, name);
    assert!(readme.contains(&line), "the README does not say how to build: {readme}");

    // The toolchains are shared with the examples' builds, under this workspace's target/.
    let toolchains = target_dir().join("guest-toolchains");
    let status = Command::new("sh")
        .args(["-c", &line])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", target_dir().join("scaffold-rust"))
        .env("KINFORMER_PYTHON_ENV", toolchains.join("python"))
        .env("KINFORMER_JS_ENV", toolchains.join("js"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .unwrap();
    assert!(status.success(), "{line}: {status}");
    scratch
}

/// `kinformer check` of the built plugin: it registers for pods (as a
/// controller, of pods), granted in one namespace, and writes nothing.
fn assert_checks(dir: &Path, name: &str, world: World) {
    let report = check(&dir.join(name).join(format!("{name}.wasm")), None).unwrap();
    assert_eq!(report.registration.name, name);
    assert!(report.review.refused.is_empty(), "{report}");
    let watched: Vec<String> = report
        .review
        .subscriptions
        .iter()
        .map(|s| format!("{}/{} deliver={}", s.gvk.api_version(), s.gvk.kind, s.deliver))
        .collect();
    assert_eq!(watched, ["v1/Pod deliver=true"]);
    let primary = report.review.controller.as_ref().map(|spec| spec.primary.kind.clone());
    match world {
        World::Plugin => assert_eq!(primary, None),
        World::Controller => assert_eq!(primary.as_deref(), Some("Pod")),
    }
    let granted = report.to_string();
    assert!(granted.contains("writes nothing"), "{granted}");
}

#[test]
fn a_new_rust_plugin_builds_and_checks() {
    let scratch = scaffold_and_build(Language::Rust, World::Plugin, "rust-logger");
    assert_checks(scratch.path(), "rust-logger", World::Plugin);
}

#[test]
fn a_new_python_plugin_builds_and_checks() {
    let scratch = scaffold_and_build(Language::Python, World::Plugin, "python-logger");
    assert_checks(scratch.path(), "python-logger", World::Plugin);
}

#[test]
fn a_new_javascript_plugin_builds_and_checks() {
    let scratch = scaffold_and_build(Language::JavaScript, World::Plugin, "js-logger");
    assert_checks(scratch.path(), "js-logger", World::Plugin);
}

#[test]
fn a_new_controller_builds_and_checks_in_each_language() {
    for (language, name) in [
        (Language::Rust, "rust-reconciler"),
        (Language::Python, "python-reconciler"),
        (Language::JavaScript, "js-reconciler"),
    ] {
        let scratch = scaffold_and_build(language, World::Controller, name);
        assert_checks(scratch.path(), name, World::Controller);
    }
}

#[test]
fn a_new_plugin_needs_a_plain_name_and_a_new_directory() {
    let scratch = tempfile::tempdir().unwrap();
    for bad in ["", "Caps", "9lives", "dash-", "under_score", "a/b"] {
        let error = new_plugin(
            &scratch.path().join("x"),
            bad,
            Language::Rust,
            World::Plugin,
            &SdkSource::Git,
        )
        .unwrap_err();
        assert!(error.to_string().contains("bad plugin name"), "{bad}: {error}");
    }
    let error = new_plugin(
        scratch.path(),
        "taken",
        Language::Python,
        World::Controller,
        &SdkSource::Git,
    )
    .unwrap_err();
    assert!(error.to_string().contains("exists already"), "{error}");
}
