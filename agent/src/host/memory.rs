//! The agent's own memory: how the allocator is set up before the first thread starts, and the
//! free pages it keeps given back to the kernel once per interval.
//!
//! Naming the frames of short processes parses and drops images all the time, and each batch is
//! built, encoded and spooled in buffers of megabytes. glibc gives each thread an arena of its
//! own on its first allocation (up to eight per CPU) and keeps freed pages in each; large
//! buffers come from the arenas once a freed one has raised its dynamic mmap threshold. On a
//! node of short processes the agent's peak was 71 MiB where its live heap peaks near 31 MiB
//! (design 026, BENCHMARKS.md "The agent's memory as short processes come and go").

/// The arenas the agent's threads share (glibc's `M_ARENA_MAX`). One: the threads that allocate
/// much (the drain, the runtime's workers) take turns rarely, and most small blocks come from
/// each thread's own cache (tcache) without the arena's lock.
const ARENAS: i32 = 1;

/// Blocks from this size up are mapped and unmapped on their own (glibc's `M_MMAP_THRESHOLD`,
/// fixed: glibc otherwise raises it to the largest block freed, up to 32 MiB, and a batch's
/// megabytes then stay in the heap after it is sent).
const MMAP_FROM_BYTES: i32 = 256 * 1024;

/// Sets up the allocator as described above. Call first in `main`, before any thread starts:
/// glibc fixes its arena limit when the first thread but the main one allocates. Operators keep
/// the last word: a setting given in glibc's environment (`MALLOC_ARENA_MAX`,
/// `MALLOC_MMAP_THRESHOLD_`, or the same tunable in `GLIBC_TUNABLES`) is left as given. A no-op
/// with other C libraries.
pub fn set_up_allocator() {
    #[cfg(target_env = "gnu")]
    {
        let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        for (variable, tunable, param, value) in [
            ("MALLOC_ARENA_MAX", "glibc.malloc.arena_max", libc::M_ARENA_MAX, ARENAS),
            (
                "MALLOC_MMAP_THRESHOLD_",
                "glibc.malloc.mmap_threshold",
                libc::M_MMAP_THRESHOLD,
                MMAP_FROM_BYTES,
            ),
        ] {
            if std::env::var_os(variable).is_some() || tunables.contains(tunable) {
                continue;
            }
            // SAFETY: mallopt takes no pointers; it only changes the allocator's own settings.
            unsafe {
                libc::mallopt(param, value);
            }
        }
    }
}

/// Returns the free pages of every allocator arena to the kernel (glibc's `malloc_trim`); a no-op
/// with other C libraries.
pub fn release_freed() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers and only walks the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
