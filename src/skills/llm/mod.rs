//! The optional LLM classifier: the client of an OpenAI-compatible
//! endpoint (`client.rs`) and the worker's pass that classifies through it
//! (`pass.rs`).

mod client;
mod pass;

pub use client::{LlmClassifier, LlmSettings};
pub(super) use pass::Proposal;
