//! The vector side lent to others: the skills service embeds its texts
//! through the index's cache and reads tools' vectors (one by one, or as
//! group means) rather than keep a copy; the evaluation and the status ask
//! for the nearest tools and the backend's shape.

use std::collections::HashMap;
use std::sync::Arc;

use super::similarity;
use super::{IndexError, SearchIndex, VectorShape};

impl SearchIndex {
    /// Embeds texts other than tools' (skills' descriptions and examples)
    /// through the same cache, at the indexer's priority. Blocking.
    pub fn embed_texts(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, IndexError> {
        if !self.semantic_available() {
            return Err(IndexError::ModelUnavailable(
                self.model_warning().unwrap_or_default(),
            ));
        }
        let flat: Vec<&str> = texts.iter().map(String::as_str).collect();
        Ok(self
            .cached_embeddings(&flat, |_| true, false)?
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect())
    }

    /// The same texts' vectors only if every one is in the cache already:
    /// never loads the model.
    pub fn cached_texts(&self, texts: &[String]) -> Result<Option<Vec<Vec<f32>>>, IndexError> {
        let flat: Vec<&str> = texts.iter().map(String::as_str).collect();
        Ok(self
            .cached_embeddings(&flat, |_| false, false)?
            .into_iter()
            .collect())
    }

    /// The indexed vectors of the tools `wanted` picks (tools not embedded
    /// yet are missing).
    pub fn tool_vectors(
        &self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<HashMap<Arc<str>, Vec<Vec<f32>>>, IndexError> {
        let vectors = self
            .inner
            .vectors
            .read()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
        Ok(vectors.vectors_of(wanted))
    }

    /// The `limit` tools nearest `query` (a unit vector) on the vector
    /// side alone, as the index answers (exact or graph); for checking the
    /// graph against the exact scan.
    pub fn nearest_tools(
        &self,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(Arc<str>, f32)>, IndexError> {
        let vectors = self
            .inner
            .vectors
            .read()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
        Ok(vectors.search(query, limit, |_| true))
    }

    /// What answers the vector side now.
    pub fn vector_shape(&self) -> Option<VectorShape> {
        self.inner.vectors.read().ok().map(|v| v.shape())
    }

    /// The normalised mean vector of each group of tools (`groups`: tool
    /// → the groups it belongs to, among `count`); `None` for a group with
    /// no embedded tool. A tool counts once per group, by the mean of its
    /// vectors.
    pub fn group_means(
        &self,
        groups: &HashMap<Arc<str>, Vec<usize>>,
        count: usize,
    ) -> Result<Vec<Option<Vec<f32>>>, IndexError> {
        let mut sums: Vec<Option<Vec<f32>>> = vec![None; count];
        let vectors = self
            .inner
            .vectors
            .read()
            .map_err(|_| IndexError::Task("vector lock poisoned".into()))?;
        // One tool at a time: a large catalog's vectors are never copied
        // all at once.
        vectors.for_each_tool(
            |id| groups.contains_key(id),
            |tool, vectors| {
                let Some(members_of) = groups.get(tool) else {
                    return;
                };
                let Some(mean) = similarity::normalised_mean(vectors.iter().copied()) else {
                    return;
                };
                for &group in members_of.iter().filter(|g| **g < count) {
                    let sum = sums[group].get_or_insert_with(|| vec![0.0; mean.len()]);
                    sum.iter_mut().zip(&mean).for_each(|(s, m)| *s += m);
                }
            },
        );
        Ok(sums
            .into_iter()
            .map(|sum| sum.and_then(|s| similarity::normalised_mean(std::iter::once(s.as_slice()))))
            .collect())
    }
}
