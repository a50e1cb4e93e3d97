//! Tool search: the keyword index (tantivy), the vector index (HNSW over
//! local embeddings) and the hybrid ranking over both. Derived from the
//! store, never trusted over it.

pub mod embedder;
