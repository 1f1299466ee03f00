//! Log into the host's logs, tagged with the plugin's name.
//!
//! Use the macros [`crate::trace!`], [`crate::debug!`], [`crate::info!`],
//! [`crate::warn!`] and [`crate::error!`]; they format like `println!`.

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Very verbose detail.
    Trace,
    /// Detail for debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the plugin handled.
    Warn,
    /// Something failed.
    Error,
}

/// Writes one line at `level`. The host strips control characters and may drop
/// lines of a plugin that logs faster than its rate limit.
pub fn write(level: Level, message: &str) {
    #[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
    crate::testing::log(level, message);
    #[cfg(not(all(feature = "testing", not(target_arch = "wasm32"))))]
    {
        use crate::bindings::kinformer::plugin0_1_0::log as wit;
        let level = match level {
            Level::Trace => wit::Level::Trace,
            Level::Debug => wit::Level::Debug,
            Level::Info => wit::Level::Info,
            Level::Warn => wit::Level::Warn,
            Level::Error => wit::Level::Error,
        };
        wit::log(level, message);
    }
}

/// Logs at trace level.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)*)) };
}

/// Logs at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)*)) };
}

/// Logs at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)*)) };
}

/// Logs at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)*)) };
}

/// Logs at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)*)) };
}
