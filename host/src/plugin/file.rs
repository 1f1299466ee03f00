//! Reading files an operator (or anyone who can write the plugin directory)
//! put there: regular files only, after following links, opened without
//! blocking, and never more than a limit.
//!
//! A FIFO named `x.toml` would hang a plain read, a link to `/dev/zero` would
//! grow the host without end, and a sparse file of gigabytes would be read
//! whole; each is refused here with one clear error instead.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The largest manifest read. (The largest plugin file read is a limit of
/// the manifest's, [`crate::limits::Limits::module_bytes`].)
pub const MAX_MANIFEST_BYTES: u64 = 256 << 10;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file is missing or cannot be opened or read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Not a regular file (a directory, a FIFO, a device, a socket).
    #[error("not a regular file")]
    NotRegular,
    /// Larger than the limit.
    #[error("{size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The file's size (or what was read of it).
        size: u64,
        /// The limit.
        limit: u64,
    },
}

impl FileError {
    /// True when the file does not exist.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io(error) if error.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Reads `path`, a regular file of at most `limit` bytes.
///
/// # Errors
///
/// When the file is missing, not a regular file (checked before and after
/// opening it without blocking), or larger than `limit`.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        return Err(FileError::NotRegular);
    }
    if metadata.len() > limit {
        return Err(FileError::TooLarge {
            size: metadata.len(),
            limit,
        });
    }
    // Swapped for a FIFO between the check and the open: still no hang.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(FileError::NotRegular);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    let size = bytes.len() as u64;
    if size > limit {
        return Err(FileError::TooLarge { size, limit });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_the_limit_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.toml");
        std::fs::write(&path, "config = \"a\"").unwrap();
        assert_eq!(read_regular(&path, 100).unwrap(), b"config = \"a\"");
        assert!(
            read_regular(&dir.path().join("absent"), 100)
                .unwrap_err()
                .is_not_found()
        );
    }

    #[test]
    fn directories_fifos_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|status| status.success()) {
            assert!(matches!(read_regular(&fifo, 100), Err(FileError::NotRegular)));
        }
        assert!(matches!(read_regular(dir.path(), 100), Err(FileError::NotRegular)));
        let zero = dir.path().join("zero.wasm");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(matches!(read_regular(&zero, 100), Err(FileError::NotRegular)));
    }

    #[test]
    fn a_file_over_the_limit_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.wasm");
        let file = std::fs::File::create(&path).unwrap();
        // Sparse: 2 GiB of size, no data.
        file.set_len(2 << 30).unwrap();
        let error = read_regular(&path, 1 << 20).unwrap_err();
        assert!(
            matches!(error, FileError::TooLarge { size, limit } if size == 2 << 30 && limit == 1 << 20),
            "{error}"
        );
    }
}
