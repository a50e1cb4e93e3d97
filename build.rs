//! Embeds the search model and ONNX Runtime when `scripts/fetch-assets.sh`
//! has put them in `assets/`. Without them the binary still builds; search
//! then looks for the files beside the binary at run time, and falls back to
//! keyword-only search with a warning.

use std::path::Path;

const MODEL_FILES: [&str; 5] = [
    "model.onnx",
    "tokenizer.json",
    "config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
];
const RUNTIME_FILE: &str = "libonnxruntime.so";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(embedded_model)");
    println!("cargo::rustc-check-cfg=cfg(embedded_runtime)");
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let assets = Path::new(&manifest).join("assets");
    for file in MODEL_FILES.iter().chain([&RUNTIME_FILE]) {
        println!("cargo::rerun-if-changed={}", assets.join(file).display());
    }
    println!("cargo::rustc-env=MCPA_ASSETS_DIR={}", assets.display());
    if MODEL_FILES.iter().all(|file| assets.join(file).is_file()) {
        println!("cargo::rustc-cfg=embedded_model");
    } else {
        println!(
            "cargo::warning=assets/ lacks the search model (run scripts/fetch-assets.sh); this build searches by keyword only unless the files are beside the binary"
        );
    }
    if assets.join(RUNTIME_FILE).is_file() {
        println!("cargo::rustc-cfg=embedded_runtime");
    }
}
