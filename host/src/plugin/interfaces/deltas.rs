//! The `deltas` interface (0.2.0): the old object of an update in the batch
//! being handled, which a 0.2.0 batch carries only on demand.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::HostState;
use crate::object::CachedObject;
use crate::plugin::v0_2::kinformer::plugin0_2_0::deltas;

/// The old objects of the 0.2.0 batch being handled, by index; empty
/// between calls.
#[derive(Debug, Default)]
pub(crate) struct Deltas {
    old_objects: Vec<Option<Arc<CachedObject>>>,
}

impl Deltas {
    /// Holds the old objects of the batch about to be handled.
    pub(crate) fn hold(&mut self, old_objects: impl IntoIterator<Item = Option<Arc<CachedObject>>>) {
        self.old_objects.extend(old_objects);
    }

    /// Lets go of them once the batch was handled; the room is kept.
    pub(crate) fn clear(&mut self) {
        self.old_objects.clear();
    }
}

/// Adds `deltas` to the linker.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    deltas::add_to_linker::<_, HasSelf<Deltas>>(linker, |state| &mut state.deltas)
}

impl deltas::Host for Deltas {
    fn old_object(&mut self, index: u32) -> Option<String> {
        let old = self.old_objects.get(usize::try_from(index).ok()?)?;
        old.as_ref().map(|old| old.json().to_owned())
    }
}
