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
