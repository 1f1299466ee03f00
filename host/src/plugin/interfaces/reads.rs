//! The `api` interface: a plugin's uncached reads from the API server
//! (granted resources only, such as `metrics.k8s.io`), through its
//! [`Writer`], which checks the read grant, rate-limits and bounds the answer.
//! Without a writer every read answers `denied`. The time a read waits for
//! the API server is given back to the plugin's deadline, and a shadow is
//! answered what its running version read ([`View::shared`]).

use wasmtime::component::Linker;

use super::{HostState, View, Viewed, from_wit_gvk};
use crate::apiserver::{self as host, Writer};
use crate::plugin::inputs::Answer;
use crate::plugin::v0_1::kinformer::plugin::api::{self, ReadError};
use crate::plugin::v0_1::kinformer::plugin::types::GroupVersionKind;

/// Where a plugin's uncached reads go.
pub(crate) struct Reads {
    /// `None` denies them all.
    writer: Option<Writer>,
}

impl Reads {
    pub(crate) fn new(writer: Option<Writer>) -> Self {
        Self { writer }
    }
}

/// Adds `api` to the linker.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    api::add_to_linker::<_, Viewed<Reads>>(linker, |state| View {
        state: &mut state.reads,
        call: &mut state.call,
    })
}

/// Declares `to_read_error`, from the host's list of kinds.
macro_rules! to_read_error {
    ($($(#[$doc:meta])* $variant:ident = $kind:literal, read $read:ident;)*) => {
        /// The contract's `read-error` of a failed read.
        fn to_read_error(error: host::WriteError) -> ReadError {
            match error {
                $(host::WriteError::$variant(message) => ReadError::$read(message),)*
            }
        }
    };
}
host::write_error_kinds!(to_read_error);

impl View<'_, Reads> {
    /// Sends an uncached read through the plugin's writer, counting the wait
    /// as time blocked in the host.
    fn read(&mut self, request: host::ReadRequest) -> Result<Option<String>, ReadError> {
        let query = format!("read {request:?}");
        self.shared(query, Answer::Read, Answer::read, |this| {
            this.blocked(|reads| {
                let writer = reads
                    .writer
                    .as_ref()
                    .ok_or_else(|| host::WriteError::Denied("this host makes no reads from the API server".into()))?;
                writer.read_blocking(request)
            })
            .map_err(to_read_error)
        })
    }
}

impl api::Host for View<'_, Reads> {
    fn get(
        &mut self,
        gvk: GroupVersionKind,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<String>, ReadError> {
        self.read(host::ReadRequest::get(from_wit_gvk(gvk), namespace.as_deref(), &name))
    }

    fn list(
        &mut self,
        gvk: GroupVersionKind,
        namespace: Option<String>,
        label_selector: Option<String>,
        limit: u32,
    ) -> Result<String, ReadError> {
        self.read(host::ReadRequest::list(
            from_wit_gvk(gvk),
            namespace.as_deref(),
            label_selector.as_deref(),
            limit,
        ))
        .map(Option::unwrap_or_default)
    }
}
