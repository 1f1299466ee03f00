//! The `log` interface: a plugin's log lines and what it prints to stdout
//! and stderr, sanitised, rate-limited and sent to `tracing` with the
//! plugin's name.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use wasmtime::component::{HasSelf, Linker};

use super::HostState;
use crate::plugin::v0_1::kinformer::plugin::log;
use crate::rate::TokenBucket;
use kinformer_informers::Recover as _;

/// The `tracing` target of every line a plugin logs: filter on it to
/// silence plugins (`kinformer::plugin::log=off`) or to keep only them.
pub const LOG_TARGET: &str = "kinformer::plugin::log";

/// The longest log line kept; longer lines are cut.
const MAX_LOG_LINE_LEN: usize = 4096;
/// How many of a call's last stderr lines are kept to explain a trap.
const STDERR_TAIL_LINES: usize = 32;
/// How many recent log lines an instance keeps for status and tests.
const RECENT_LOG_LINES: usize = 256;

/// One line a plugin logged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogLine {
    /// Its severity.
    pub level: tracing::Level,
    /// The text, with control characters replaced.
    pub message: String,
}

/// Receives every log line of a plugin that passed its rate limit, with the
/// plugin's name: for status pages, tests and log shipping.
pub type LogSink = Arc<dyn Fn(&str, &LogLine) + Send + Sync>;

/// A plugin's log: its `log` import and its stdout and stderr end here. Lines are
/// sanitised, rate-limited, sent to `tracing` with the plugin's name, and the
/// recent ones kept.
#[derive(Clone)]
pub(crate) struct PluginLog {
    name: Arc<str>,
    state: Arc<Mutex<LogState>>,
    sink: Option<LogSink>,
}

struct LogState {
    budget: TokenBucket,
    recent: VecDeque<LogLine>,
    dropped: u64,
    /// The last lines printed to stderr in the current call, rate limit or
    /// not: what a trap is explained with.
    stderr: VecDeque<String>,
}

impl PluginLog {
    pub(crate) fn new(name: &str, lines_per_second: u32, sink: Option<LogSink>) -> Self {
        Self {
            name: name.into(),
            state: Arc::new(Mutex::new(LogState {
                budget: TokenBucket::per_second(lines_per_second),
                recent: VecDeque::new(),
                dropped: 0,
                stderr: VecDeque::new(),
            })),
            sink,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().recover()
    }

    pub(crate) fn recent(&self) -> Vec<LogLine> {
        self.state().recent.iter().cloned().collect()
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.state().dropped
    }

    /// A call begins: what it prints to stderr is kept from here on.
    pub(crate) fn begin_call(&self) {
        self.state().stderr.clear();
    }

    /// The last lines the current call printed to stderr, oldest first.
    pub(crate) fn stderr_tail(&self) -> Vec<String> {
        self.state().stderr.iter().cloned().collect()
    }

    /// Keeps a line printed to stderr for the explanation of a trap.
    fn keep_stderr(&self, line: &str) {
        let mut state = self.state();
        if state.stderr.len() == STDERR_TAIL_LINES {
            state.stderr.pop_front();
        }
        state
            .stderr
            .push_back(crate::text::sanitize(line, crate::text::MAX_ERROR_LEN));
    }

    /// Logs one line, unless the rate limit drops it.
    pub(crate) fn write(&self, level: tracing::Level, message: &str) {
        let mut state = self.state();
        if !state.budget.try_take(tokio::time::Instant::now()) {
            state.dropped += 1;
            return;
        }
        let message = crate::text::sanitize(message, MAX_LOG_LINE_LEN);
        let plugin = &*self.name;
        match level {
            tracing::Level::TRACE => tracing::trace!(target: LOG_TARGET, plugin, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(target: LOG_TARGET, plugin, "{message}"),
            tracing::Level::INFO => tracing::info!(target: LOG_TARGET, plugin, "{message}"),
            tracing::Level::WARN => tracing::warn!(target: LOG_TARGET, plugin, "{message}"),
            tracing::Level::ERROR => tracing::error!(target: LOG_TARGET, plugin, "{message}"),
        }
        let line = LogLine { level, message };
        if let Some(sink) = &self.sink {
            sink(plugin, &line);
        }
        if state.recent.len() == RECENT_LOG_LINES {
            state.recent.pop_front();
        }
        state.recent.push_back(line);
    }

    /// A stream for the plugin's stdout (`INFO`) or stderr (`WARN`): each line
    /// written becomes a log line.
    pub(crate) fn output(&self, level: tracing::Level) -> OutputLines {
        OutputLines {
            log: self.clone(),
            level,
            partial: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

/// Adds `log` to the linker.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    log::add_to_linker::<_, HasSelf<PluginLog>>(linker, |state| &mut state.log)
}

impl log::Host for PluginLog {
    fn log(&mut self, level: log::Level, message: String) {
        let level = match level {
            log::Level::Trace => tracing::Level::TRACE,
            log::Level::Debug => tracing::Level::DEBUG,
            log::Level::Info => tracing::Level::INFO,
            log::Level::Warn => tracing::Level::WARN,
            log::Level::Error => tracing::Level::ERROR,
        };
        self.write(level, &message);
    }
}

/// A WASI output stream that turns what the plugin prints into log lines.
#[derive(Clone)]
pub(crate) struct OutputLines {
    log: PluginLog,
    level: tracing::Level,
    partial: Arc<Mutex<Vec<u8>>>,
}

impl OutputLines {
    fn push(&self, bytes: &[u8]) {
        let mut partial = self.partial.lock().recover();
        for &byte in bytes {
            if byte == b'\n' {
                let line = String::from_utf8_lossy(&partial);
                let mut level = self.level;
                if level == tracing::Level::WARN {
                    self.log.keep_stderr(&line);
                    if is_runtime_noise(&line) {
                        level = tracing::Level::DEBUG;
                    }
                }
                self.log.write(level, &line);
                partial.clear();
            } else if partial.len() < MAX_LOG_LINE_LEN {
                partial.push(byte);
            }
        }
    }
}

/// A line a guest's language runtime prints on stderr after the plugin's own
/// account of a failure, telling nothing of it: Rust's hint about
/// `RUST_BACKTRACE` (no use in a component) and componentize-py's panic for
/// an exception it did not expect. Logged at debug: the trap's message says
/// the failure (see `trap`).
fn is_runtime_noise(line: &str) -> bool {
    line.starts_with("note: run with `RUST_BACKTRACE=1`")
        || line == "Python function threw an unexpected exception"
        || line.contains(" panicked at runtime/src/lib.rs:")
}

impl wasmtime_wasi::cli::IsTerminal for OutputLines {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for OutputLines {
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for OutputLines {
    async fn ready(&mut self) {}
}

impl wasmtime_wasi::p2::OutputStream for OutputLines {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), wasmtime_wasi::p2::StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), wasmtime_wasi::p2::StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, wasmtime_wasi::p2::StreamError> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for OutputLines {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        bytes: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(bytes);
        std::task::Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_lines_become_log_lines() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        let sink: LogSink = Arc::new(move |plugin, line| {
            seen.lock().unwrap().push((plugin.to_owned(), line.clone()));
        });
        let log = PluginLog::new("printer", 100, Some(sink));
        let stdout = log.output(tracing::Level::INFO);
        stdout.push(b"hello, ");
        stdout.push(b"world\nsecond\x1b");
        log.output(tracing::Level::WARN).push(b"oops\n");
        stdout.push(b"\n");
        let info = |message: &str| LogLine {
            level: tracing::Level::INFO,
            message: message.into(),
        };
        let expected = vec![
            info("hello, world"),
            LogLine {
                level: tracing::Level::WARN,
                message: "oops".into(),
            },
            info("second\u{fffd}"),
        ];
        assert_eq!(log.recent(), expected);
        let sunk: Vec<LogLine> = lines.lock().unwrap().iter().map(|(_, line)| line.clone()).collect();
        assert_eq!(sunk, expected);
        assert!(lines.lock().unwrap().iter().all(|(plugin, _)| plugin == "printer"));
    }

    #[test]
    fn a_language_runtime_s_panic_lines_go_to_debug_and_the_plugin_s_own_stay() {
        let log = PluginLog::new("python", 100, None);
        let stderr = log.output(tracing::Level::WARN);
        stderr.push(
            b"KeyError: 'app'\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\n\
              Python function threw an unexpected exception\n\
              note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n",
        );
        let levels: Vec<(tracing::Level, String)> = log
            .recent()
            .into_iter()
            .map(|line| (line.level, line.message))
            .collect();
        assert_eq!(levels[0], (tracing::Level::WARN, "KeyError: 'app'".to_owned()));
        assert!(
            levels[1..].iter().all(|(level, _)| *level == tracing::Level::DEBUG),
            "{levels:?}"
        );
        // The trap's explanation still reads every line.
        assert_eq!(log.stderr_tail().len(), 4);
    }

    #[test]
    fn control_characters_are_replaced_and_long_lines_cut() {
        assert_eq!(
            crate::text::sanitize("ok\n\u{1b}[31mred", MAX_LOG_LINE_LEN),
            "ok\u{fffd}\u{fffd}[31mred"
        );
        let long = crate::text::sanitize(&"é".repeat(MAX_LOG_LINE_LEN), MAX_LOG_LINE_LEN);
        assert!(long.len() <= MAX_LOG_LINE_LEN + '…'.len_utf8());
        assert!(long.ends_with('…'));
    }
}
