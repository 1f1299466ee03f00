//! What the kinformer host and its plugins' SDKs agree on beside the WIT
//! contract: the names of the delta types, and the stable hash by which a
//! canary's share of the keys (and a Lease's name) is the same in every
//! process, replica and release. No dependencies: the host, the informers,
//! the Rust SDK (built for `wasm32-wasip2`) and the API emulation all use it.

#![warn(missing_docs)]
#![no_std]

use core::fmt;

/// What happened to an object, in client-go's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeltaType {
    /// The object appeared: created, or seen for the first time.
    Added,
    /// The object changed; the delta carries the old and the new state.
    Updated,
    /// The object is gone; the delta carries its last known state (also for a
    /// delete that happened while the watch was down: a tombstone).
    Deleted,
    /// The object was present in a relist.
    Replaced,
    /// A periodic resync of an unchanged object.
    Sync,
}

impl DeltaType {
    /// Every delta type, in the order above.
    pub const ALL: [Self; 5] = [Self::Added, Self::Updated, Self::Deleted, Self::Replaced, Self::Sync];

    /// `Added`, `Updated`, `Deleted`, `Replaced` or `Sync`: client-go's name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "Added",
            Self::Updated => "Updated",
            Self::Deleted => "Deleted",
            Self::Replaced => "Replaced",
            Self::Sync => "Sync",
        }
    }

    /// The delta type client-go names `name`.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|delta_type| delta_type.as_str() == name)
    }
}

impl fmt::Display for DeltaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// FNV-1a, fed piece by piece: the same in every process and release.
#[derive(Debug, Clone, Copy)]
pub struct StableHasher(u64);

impl Default for StableHasher {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl StableHasher {
    /// Feeds `bytes`.
    #[must_use]
    pub fn write(mut self, bytes: &[u8]) -> Self {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }

    /// The hash of what was fed.
    #[must_use]
    pub fn finish(self) -> u64 {
        self.0
    }
}

/// FNV-1a of `text`: the same in every process and release, for shares and
/// names that must agree between replicas and versions.
#[must_use]
pub fn stable_hash(text: &str) -> u64 {
    StableHasher::default().write(text.as_bytes()).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stable_hash_is_fnv_1a() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            StableHasher::default().write(b"a").write(b"b").finish(),
            stable_hash("ab")
        );
    }

    #[test]
    fn delta_types_read_back_by_name() {
        for delta_type in DeltaType::ALL {
            assert_eq!(DeltaType::parse(delta_type.as_str()), Some(delta_type));
        }
        assert_eq!(DeltaType::parse("Modified"), None);
    }
}
