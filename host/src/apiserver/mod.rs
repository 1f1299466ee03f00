//! Writes to the cluster on a plugin's behalf: checked against its grant,
//! rate-limited, audited.
//!
//! A [`Cluster`] is the connection writes go through: the client, the Tokio
//! runtime that drives it, and what discovery resolved (each resource type is
//! looked up once). From it, each plugin gets a [`Writer`] bound to the
//! plugin's name, grant, limits and [`WriteMode`](crate::grant::WriteMode).
//! Every write a writer is asked for goes through the same steps:
//!
//! 1. its arguments are validated and bounded ([`WriteRequest`]): names,
//!    namespaces, the subresource, the size of the object or patch;
//! 2. the grant is checked ([`Grant::allows_write`](crate::grant::Grant::allows_write)):
//!    outside it, nothing is sent and the answer is [`WriteError::Denied`];
//! 3. a token is taken from the plugin's bucket (`writes-per-second`,
//!    `write-burst`): none left is [`WriteError::Throttled`], at once;
//! 4. the request is sent with `kube::Api<DynamicObject>`, the plugin's name as
//!    field manager, `dryRun=All` in dry-run mode, under `write-timeout-ms`;
//! 5. one audit line is logged (target `kinformer::audit`) and a
//!    [`WriteRecord`] handed to the writer's observer.
//!
//! [`Writer::record_event`] records `events.k8s.io/v1` Events as client-go's
//! recorder does: repeats within ten minutes are counted in one Event's
//! `series`, and a plugin's events about one object are rate-limited
//! (`events.rs`).
//!
//! A cluster made with [`Cluster::offline`] has no API server: in step 4 the
//! write is answered by an [`Offline`] and sent nowhere, the other steps are
//! the same.

mod audit;
mod connection;
mod discovery;
mod events;
mod offline;
pub mod proxy;
mod reader;
mod request;
mod writer;

pub use audit::{WriteObserver, WriteRecord};
pub use connection::Cluster;
pub use events::{SERIES_WINDOW, SPAM_BURST, SPAM_REFILL};
pub use offline::Offline;
pub use reader::{Read, ReadRequest};
pub use request::{DeleteOptions, EventType, ObjectRef, PatchType, Propagation, WriteRequest};
pub use writer::Writer;

/// Hands every kind of [`WriteError`] to the macro `$then`: the one list of
/// the kinds on the host side. Each kind is its variant with its doc; its
/// name in the plugin contract (`write-error`); and the `read-error` an
/// uncached read that fails so reports (a read has no preconditions, and a
/// type the server does not serve is a bad request). [`WriteError`], its
/// `kind` and `message`, and the conversions into the contract's types are
/// made from it, so none of them can miss a kind.
macro_rules! write_error_kinds {
    ($then:ident) => {
        $then! {
            /// Outside the plugin's write grant: nothing was sent.
            Denied = "denied", read Denied;
            /// The API server refused it (its RBAC: 401, 403).
            Forbidden = "forbidden", read Forbidden;
            /// A precondition failed: a stale resourceVersion or uid, an object that
            /// exists already, fields another manager owns (409).
            Conflict = "conflict", read Invalid;
            /// The object does not exist (404).
            NotFound = "not-found", read Invalid;
            /// The request was malformed, or the server rejected the object or patch
            /// (400, 422): what is wrong.
            Invalid = "invalid", read Invalid;
            /// Over the plugin's write rate, or the server asked to slow down (429).
            Throttled = "throttled", read Throttled;
            /// The server could not be reached in time or failed (timeouts, 5xx).
            Unavailable = "unavailable", read Unavailable;
            /// The request or the object is too large (413, or the host's limit).
            TooLarge = "too-large", read TooLarge;
        }
    };
}
pub(crate) use write_error_kinds;

/// Declares [`WriteError`] from [`write_error_kinds`].
macro_rules! declare_write_error {
    ($($(#[$doc:meta])* $variant:ident = $kind:literal, read $read:ident;)*) => {
        /// Why a write (or an uncached read) was not done; the `write-error` a
        /// plugin sees.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum WriteError {
            $($(#[$doc])* $variant(String),)*
        }

        impl WriteError {
            /// The kind of error as the contract names it: `denied`, `not-found`, ...
            #[must_use]
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => $kind,)*
                }
            }

            /// What went wrong, without the kind.
            #[must_use]
            pub fn message(&self) -> &str {
                match self {
                    $(Self::$variant(message))|* => message,
                }
            }
        }
    };
}
write_error_kinds!(declare_write_error);

impl std::fmt::Display for WriteError {
    /// The kind in words, then what went wrong: `not found: pods "web" not found`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind().replace('-', " "), self.message())
    }
}

impl std::error::Error for WriteError {}

impl WriteError {
    /// The error of a failed API call, by the server's status code; transport
    /// failures are [`WriteError::Unavailable`].
    #[must_use]
    pub fn from_kube(error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => {
                let message = if status.message.is_empty() {
                    format!("the API server answered {} {}", status.code, status.reason)
                } else {
                    status.message.clone()
                };
                match status.code {
                    401 | 403 => Self::Forbidden(message),
                    404 | 410 => Self::NotFound(message),
                    409 => Self::Conflict(message),
                    413 => Self::TooLarge(message),
                    429 => Self::Throttled(message),
                    408 | 500..=599 => Self::Unavailable(message),
                    _ => Self::Invalid(message),
                }
            }
            kube::Error::BuildRequest(_) => Self::Invalid(crate::one_line(error)),
            other => Self::Unavailable(crate::one_line(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(kube::core::Status::failure(message, "Reason").with_code(code).boxed())
    }

    #[test]
    fn api_errors_map_to_write_errors_by_status_code() {
        let kinds: Vec<&str> = [401, 403, 404, 409, 400, 422, 429, 413, 500, 503, 504, 418]
            .into_iter()
            .map(|code| WriteError::from_kube(&api_error(code, "why")).kind())
            .collect();
        assert_eq!(
            kinds,
            [
                "forbidden",
                "forbidden",
                "not-found",
                "conflict",
                "invalid",
                "invalid",
                "throttled",
                "too-large",
                "unavailable",
                "unavailable",
                "unavailable",
                "invalid"
            ]
        );
        let invalid = WriteError::from_kube(&api_error(422, "spec.replicas: Invalid value: -1"));
        assert_eq!(invalid.message(), "spec.replicas: Invalid value: -1");
        assert_eq!(invalid.to_string(), "invalid: spec.replicas: Invalid value: -1");
    }
}
