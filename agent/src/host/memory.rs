//! The agent's own memory: the free pages the allocator keeps are given back to the kernel once
//! per interval.
//!
//! Naming the frames of short processes parses and drops images all the time; glibc keeps the
//! freed pages in its arenas. Trimming them is a small part of the agent's resident memory on
//! such a node (BENCHMARKS.md, "The agent's memory as short processes come and go").

/// Returns the free pages of every allocator arena to the kernel (glibc's `malloc_trim`); a no-op
/// with other C libraries.
pub fn release_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers and only walks the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
