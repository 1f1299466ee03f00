//! The error a handler reports to the host.

use std::fmt;

use crate::bindings::kinformer::plugin0_1_0::types as wit;

/// An error a handler returns; the host logs its message.
///
/// Any standard error converts into it, so `?` works on JSON parsing, cache
/// queries and the like. Like `anyhow::Error`, it does not itself implement
/// [`std::error::Error`].
pub struct Error {
    message: String,
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
        }
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    #[doc(hidden)]
    pub fn into_wit(self) -> wit::Error {
        wit::Error { message: self.message }
    }
}

impl<E: std::error::Error> From<E> for Error {
    fn from(error: E) -> Self {
        // Keep the whole chain: the host only sees the message.
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self { message }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Error").field(&self.message).finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
