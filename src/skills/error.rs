//! What the skills service fails with, in one place every part of it
//! returns.

use crate::index::IndexError;
use crate::model::skill::InvalidSkill;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum SkillsError {
    #[error(transparent)]
    Invalid(#[from] InvalidSkill),
    #[error("skill '{0}' not found")]
    NotFound(String),
    #[error("skill '{0}' already exists")]
    Exists(String),
    #[error("the skill id in the path ('{path}') and the body ('{body}') differ")]
    IdMismatch { path: String, body: String },
    #[error("suggestion {0} not found")]
    SuggestionNotFound(u64),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("the skills task failed: {0}")]
    Task(String),
}
