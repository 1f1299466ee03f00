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

/// Declares an error whose variants each carry the host's message: its
/// `message`, its `kind` (the host's name for it), `Display` as `WHAT KIND:
/// MESSAGE`, `std::error::Error`, and the conversion from the contract's error
/// of the same variants. One list per error, so none of them can miss a kind.
macro_rules! error_kinds {
    (
        $(#[doc = $doc:literal])*
        $name:ident, shown as $what:literal, from $module:ident::$wit:ident {
            $(
                $(#[doc = $variant_doc:literal])*
                $variant:ident = $kind:literal,
            )*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum $name {
            $(
                $(#[doc = $variant_doc])*
                $variant(String),
            )*
        }

        impl $name {
            /// What went wrong.
            #[must_use]
            pub fn message(&self) -> &str {
                match self {
                    $(Self::$variant(message))|* => message,
                }
            }

            #[doc = concat!("The kind of error as the host names it: ", $("`", $kind, "` "),*, ".")]
            #[must_use]
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => $kind,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($what, " {}: {}"), self.kind(), self.message())
            }
        }

        impl std::error::Error for $name {}

        impl From<$module::$wit> for $name {
            fn from(error: $module::$wit) -> Self {
                match error {
                    $($module::$wit::$variant(message) => Self::$variant(message),)*
                }
            }
        }
    };
}

pub(crate) use error_kinds;
