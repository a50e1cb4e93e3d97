//! Process memory: the allocators' settings (mimalloc for what Rust
//! allocates, glibc's malloc for ONNX Runtime), and the housekeeping shared
//! by the parts that build large transient copies of the catalog (the
//! routing table, the search index).
//!
//! Through `libc`, not `rustix` like the crate's other system calls:
//! `mallopt`, `malloc_trim` and `getenv`/`setenv` are glibc's functions,
//! not system calls, and rustix does not wrap them.

/// Returns freed heap pages to the system now, rather than at the
/// allocator's leisure, so a daemon does not stay at the peak of its
/// largest rebuild: mimalloc's (the binary's allocator) and glibc's (what
/// ONNX Runtime allocates).
pub fn release_freed() {
    // SAFETY: mi_collect only walks mimalloc's own free lists; it is a
    // no-op for a process that never allocated through it.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Caps glibc's malloc arenas (what ONNX Runtime allocates; Rust's
/// allocations go to mimalloc, the binary's allocator) at one per core
/// (its default is eight per core). Each thread that allocates gets an
/// arena, and a transient copy spread over many of them leaves every one
/// fragmented: with 100,000 tools, when Rust's allocations went to glibc
/// too, a daemon settled at 2.0 GB with the default against 1.4 GB with
/// two arenas on this 2-core machine. Call before any thread starts.
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

/// mimalloc's settings for this process, as the environment variables it
/// reads when it starts (before `main`, so too late to set there: set
/// with `mi_option_set` from `main` they changed nothing measurable). A
/// page's memory is committed when the page is first used rather than an
/// arena's up front: with the search model loaded the defaults settled
/// 25–45 MiB above glibc's malloc, these 5–20 MiB (BENCHMARKS.md, issue
/// 13). A value the user set stands.
pub const MIMALLOC_SETTINGS: [(&std::ffi::CStr, &std::ffi::CStr); 2] = [
    (c"MIMALLOC_ARENA_EAGER_COMMIT", c"0"),
    (c"MIMALLOC_PAGE_COMMIT_ON_DEMAND", c"1"),
];

/// Which of `MIMALLOC_SETTINGS` were put in the environment here (bit i
/// for setting i), to be taken out again once mimalloc has read them.
static SET_HERE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Puts `MIMALLOC_SETTINGS` in the environment where the user has not set
/// them. Runs as one of the binary's first constructors, before
/// mimalloc's.
pub extern "C" fn set_mimalloc_settings() {
    for (i, (name, value)) in MIMALLOC_SETTINGS.into_iter().enumerate() {
        // SAFETY: one thread exists this early, and the strings are
        // NUL-terminated literals; setenv copies them.
        unsafe {
            if libc::getenv(name.as_ptr()).is_null()
                && libc::setenv(name.as_ptr(), value.as_ptr(), 0) == 0
            {
                SET_HERE.fetch_or(1 << i, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// Takes the settings `set_mimalloc_settings` added out of the environment
/// again (mimalloc has read them), so the servers we start do not inherit
/// them. Call first thing in `main`, before any thread starts.
pub fn forget_mimalloc_settings() {
    let set = SET_HERE.swap(0, std::sync::atomic::Ordering::Relaxed);
    for (i, (name, _)) in MIMALLOC_SETTINGS.into_iter().enumerate() {
        if set & (1 << i) != 0 {
            // SAFETY: called before any other thread exists, so nothing
            // reads the environment meanwhile.
            unsafe {
                libc::unsetenv(name.as_ptr());
            }
        }
    }
}
