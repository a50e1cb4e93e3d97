//! The `mcp-aggregator` binary: everything lives in the library.

/// mimalloc: per call the front doors allocate and free dozens of small
/// blocks across threads, and glibc's malloc spent a fifth of the daemon's
/// CPU on it under load (see BENCHMARKS.md, issue 13).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc reads its settings from the environment in its constructor
/// (default priority): they are put there by one that runs before it.
/// Not `.preinit_array`: glibc sets the environment again after it runs.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array.00101")]
static MIMALLOC_SETTINGS: extern "C" fn() = mcp_aggregator::memory::set_mimalloc_settings;

fn main() -> std::process::ExitCode {
    mcp_aggregator::memory::forget_mimalloc_settings();
    mcp_aggregator::memory::limit_arenas();
    mcp_aggregator::cli::main()
}
