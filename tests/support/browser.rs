//! Headless Chromium (Debian's `chromium`) for the status page's tests: each
//! run with a fresh profile and none of the background connections this
//! machine's closed network refuses.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Chromium's path when the tests should use it: where it is installed; in
/// CI (`CI` set) it must be, elsewhere its absence is said and `None`
/// returned.
pub fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs Chromium for the status page's tests: apt-get install chromium"
        );
        eprintln!("no Chromium (apt-get install chromium): the page's browser checks are skipped");
    }
    found
}

/// Chromium in headless mode, with a fresh profile under `work`, removed
/// when the returned directory is dropped.
fn headless(chromium: &Path, work: &Path) -> (Command, tempfile::TempDir) {
    let profile = tempfile::tempdir_in(work).unwrap();
    let mut command = Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()));
    (command, profile)
}

/// The page at `url` as Chromium built it, serialised: what its parser made
/// of the HTML, after the page loaded.
pub fn dom(chromium: &Path, work: &Path, url: &str) -> String {
    let (mut command, _profile) = headless(chromium, work);
    let output = command.arg("--dump-dom").arg(url).output().unwrap();
    assert!(
        output.status.success(),
        "chromium --dump-dom {url}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A PNG of the page at `url` in a `width`×`height` window, into `file`.
pub fn screenshot(chromium: &Path, work: &Path, url: &str, file: &Path, (width, height): (u32, u32)) {
    let (mut command, _profile) = headless(chromium, work);
    let output = command
        .arg(format!("--screenshot={}", file.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(url)
        .output()
        .unwrap();
    assert!(
        output.status.success() && file.exists(),
        "chromium --screenshot {url}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
