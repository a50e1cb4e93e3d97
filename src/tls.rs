//! TLS set-up: rustls with the `ring` provider (lighter to build than
//! aws-lc), installed once for every HTTP client in the process.

/// Installs the process-wide crypto provider; safe to call many times.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
