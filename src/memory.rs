//! Process memory housekeeping shared by the parts that build large
//! transient copies of the catalog (the routing table, the search index).

/// Returns freed heap pages to the system. glibc keeps them in its free
/// lists otherwise, so a daemon would stay at the peak of its largest
/// rebuild for good.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps glibc's malloc arenas at one per core (its default is eight per
/// core). Each thread that allocates gets an arena, and a transient copy
/// of a large catalog spread over many of them leaves every one
/// fragmented: with 100,000 tools a daemon settled at 2.0 GB with the
/// default and 1.4 GB with two arenas on this 2-core machine. Call before
/// any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // A limit the user set (glibc reads it at start) stands.
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets an allocator parameter; no thread
        // has allocated from another arena yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}
