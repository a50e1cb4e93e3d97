//! The `mcp-aggregator` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    mcp_aggregator::memory::limit_arenas();
    mcp_aggregator::cli::main()
}
