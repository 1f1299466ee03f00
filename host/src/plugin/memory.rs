//! Giving memory back to the system after a compile.
//!
//! Compiling a large component allocates hundreds of megabytes in many small
//! pieces across the compiler's threads, and frees them when it is done.
//! glibc's allocator keeps freed memory in its heaps for reuse, so the host
//! would stay as large as its largest compile for good. After each compile
//! the free memory of every heap is handed back.

/// Hands the allocator's free memory back to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code, reason = "glibc's malloc_trim has no safe binding")]
pub(super) fn release_free_memory() {
    // SAFETY: malloc_trim takes each heap's own lock and only returns pages
    // that hold no allocation; it may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators give memory back on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn release_free_memory() {}
