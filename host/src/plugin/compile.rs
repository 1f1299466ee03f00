//! Compiling a component in a short-lived child process.
//!
//! Compiling a large component (an 18 MB Python one, say) takes the compiler
//! hundreds of megabytes, and the allocator keeps much of it resident after
//! the compile is done. With [`EngineOptions::compile_process`] set, the engine
//! runs that program to compile each component it has not compiled before
//! into the shared compile cache; the program's memory goes when it exits, and
//! the host loads the result from the cache as it would after a restart. The
//! program only has to call [`run_compile_process`] first thing in `main`.
//!
//! The child is told what to do through the environment: where the cache is,
//! how the engine allocates (the cache is keyed by the engine's settings, so
//! both sides must build the same engine), and how long it may take. It reads
//! the component from stdin, compiles it, and answers with its exit status
//! and, on failure, the error on stderr. A child over its time exits on its
//! own, so a compile that runs away cannot keep a thread of the host waiting.
//!
//! The host notes each component compiled, by digest and engine settings, in
//! a marker file beside the cache: a component with a marker loads in the
//! host's process (from the cache, in milliseconds) without starting a child.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::engine::{EngineOptions, engine_config};

/// The cache directory the child compiles into; its presence makes a process
/// a compile child.
const CACHE_VAR: &str = "KINFORMER_COMPILE_INTO";
/// The engine's pooled instances, when it pools.
const POOL_VAR: &str = "KINFORMER_COMPILE_POOLED_INSTANCES";
/// How long the child may compile, in milliseconds.
const TIMEOUT_VAR: &str = "KINFORMER_COMPILE_TIMEOUT_MS";
/// The child's exit status when it ran out of time.
const TIMED_OUT: u8 = 124;

/// Compiles the component on stdin into the cache when this process was
/// started as a compile child, and returns its exit code; returns `None` in
/// any other process, which then goes on with its own `main`.
///
/// Call it first thing in the `main` of the program given as
/// [`EngineOptions::compile_process`].
#[must_use]
pub fn run_compile_process() -> Option<ExitCode> {
    let cache_dir = std::env::var_os(CACHE_VAR)?;
    let number = |name: &str| std::env::var(name).ok().and_then(|value| value.parse::<u64>().ok());
    if let Some(limit) = number(TIMEOUT_VAR) {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(limit));
            std::process::exit(i32::from(TIMED_OUT));
        });
    }
    let options = EngineOptions {
        cache_dir: Some(PathBuf::from(cache_dir)),
        pooled_instances: number(POOL_VAR).and_then(|pool| u32::try_from(pool).ok()),
        compile_process: None,
    };
    let compiled = (|| -> wasmtime::Result<()> {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes)?;
        let engine = wasmtime::Engine::new(&engine_config(&options)?)?;
        wasmtime::component::Component::new(&engine, &bytes)?;
        Ok(())
    })();
    Some(match compiled {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = write!(std::io::stderr(), "{error:#}");
            ExitCode::FAILURE
        }
    })
}

/// A compile in a child process of the host's own program: its own error when
/// the component does not compile, or why the child could not run or finish.
pub(super) struct Child<'a> {
    pub(super) program: &'a Path,
    pub(super) cache_dir: &'a Path,
    pub(super) pooled_instances: Option<u32>,
    /// Set when the host shuts down: the child is ended.
    pub(super) ending: &'a AtomicBool,
}

impl Child<'_> {
    /// Compiles `bytes` in the child into the cache, allowing it `limit`;
    /// ends it when the host shuts down meanwhile.
    pub(super) fn compile(&self, bytes: &[u8], limit: Duration) -> wasmtime::Result<()> {
        if self.ending.load(Ordering::Relaxed) {
            wasmtime::bail!("not compiled: the host is shutting down");
        }
        let mut command = std::process::Command::new(self.program);
        command
            .env(CACHE_VAR, self.cache_dir)
            .env(TIMEOUT_VAR, limit.as_millis().to_string())
            .env_remove(POOL_VAR)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(pool) = self.pooled_instances {
            command.env(POOL_VAR, pool.to_string());
        }
        let mut child = command
            .spawn()
            .map_err(|error| wasmtime::Error::new(error).context(format!("starting {}", self.program.display())))?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        // The child reads all of stdin before compiling, so writing it all first
        // cannot block on a child waiting for its stderr to be read.
        let written = stdin.write_all(bytes);
        drop(stdin);
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if self.ending.load(Ordering::Relaxed) {
                let _ = child.kill();
                let _ = child.wait();
                wasmtime::bail!("the compile process was ended: the host is shutting down");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let message = reader.join().unwrap_or_default();
        match status.code() {
            Some(0) => Ok(written?),
            Some(code) if code == i32::from(TIMED_OUT) => {
                wasmtime::bail!("the compile process ran over its {} ms", limit.as_millis())
            }
            _ => {
                let message = message.trim();
                if message.is_empty() {
                    wasmtime::bail!("the compile process ended with {status}");
                }
                Err(wasmtime::Error::msg(message.to_owned()))
            }
        }
    }
}

/// The marker noting that the component with `digest` was compiled into the
/// cache in `cache_dir` by an engine with these settings.
pub(super) fn marker(cache_dir: &Path, digest: &str, engine: &wasmtime::Engine) -> PathBuf {
    use std::hash::{Hash as _, Hasher as _};
    // `DefaultHasher::new` has fixed keys: the same settings give the same
    // name in every process built from the same sources.
    let mut settings = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut settings);
    cache_dir
        .join("kinformer-compiled")
        .join(format!("{digest}-{:016x}", settings.finish()))
}

/// Notes that a component was compiled into the cache; a marker that cannot
/// be written only costs a child next time.
pub(super) fn mark(marker: &Path) {
    if let Some(dir) = marker.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(marker, b"");
}
