//! The keyword index: tantivy (BM25) on disk in the data dir. One combined
//! field carries everything a tool says about itself; name and server fields
//! repeat the most telling words at a lower boost. Identifiers are split
//! into words before tokenising, words are stemmed, and filler words in
//! queries ("please", "I want to") are dropped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use tantivy::collector::TopDocs;
use tantivy::query::{
    BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, TermQuery, TermSetQuery,
};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value as _,
};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use super::text::{ToolTexts, with_split_identifiers};

const ANALYZER: &str = "tool_words";
/// Per-field weights; the combined field leads, name and server follow at a
/// lower boost (what measured best).
const BOOST_ALL: f32 = 1.0;
const BOOST_NAME: f32 = 0.6;
const BOOST_SERVER: f32 = 0.4;
const WRITER_MEMORY: usize = 20_000_000;

/// Lucene's English stop set: words too common to tell tools apart.
const ENGLISH_STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// Words that say nothing about which tool is meant.
const QUERY_FILLER: &[&str] = &[
    "please",
    "want",
    "need",
    "can",
    "could",
    "would",
    "should",
    "help",
    "me",
    "my",
    "i",
    "you",
    "tool",
    "tools",
    "use",
    "using",
    "some",
    "something",
    "way",
    "how",
    "do",
    "let",
    "lets",
    "let's",
    "like",
    "just",
    "thing",
    "things",
];

#[derive(Debug, thiserror::Error)]
pub enum KeywordError {
    #[error("keyword index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("keyword index directory: {0}")]
    Io(#[from] std::io::Error),
    #[error("keyword index: {0}")]
    Open(#[from] tantivy::directory::error::OpenDirectoryError),
}

/// Removes whatever is at `path`: a folder with its files, or a file.
fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

#[derive(Debug, Clone, Copy)]
struct Fields {
    id: Field,
    server_id: Field,
    hash: Field,
    name: Field,
    server: Field,
    all: Field,
}

/// One tool as the keyword index stores it.
pub struct KeywordDoc<'a> {
    pub tool_id: &'a str,
    pub server_id: &'a str,
    /// The definition hash, so a restart can tell what changed.
    pub hash: &'a str,
    pub texts: &'a ToolTexts,
}

pub struct KeywordIndex {
    /// Where it lives; `None` when kept in memory (the disk would not
    /// take it at start).
    dir: Option<PathBuf>,
    fields: Fields,
    /// Replaced whole when the index starts over in a folder made anew.
    opened: RwLock<Arc<Opened>>,
    query_analyzer: Mutex<TextAnalyzer>,
}

/// One opened tantivy index.
struct Opened {
    index: Index,
    reader: IndexReader,
    /// `None` after a write failed: tantivy's writer does not survive a
    /// failed write (a full disk kills its thread), so the next write
    /// opens a new one instead of failing until a restart.
    writer: Mutex<Option<IndexWriter>>,
}

impl std::fmt::Debug for KeywordIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeywordIndex").finish_non_exhaustive()
    }
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Fields {
        id: builder.add_text_field("id", STRING | STORED),
        server_id: builder.add_text_field("server_id", STRING),
        hash: builder.add_text_field("hash", STORED),
        name: builder.add_text_field("name", text.clone()),
        server: builder.add_text_field("server", text.clone()),
        all: builder.add_text_field("all", text),
    };
    (builder.build(), fields)
}

fn analyzer(extra_stop_words: &[&str]) -> TextAnalyzer {
    let stops: Vec<String> = ENGLISH_STOP_WORDS
        .iter()
        .chain(extra_stop_words)
        .map(|w| (*w).to_owned())
        .collect();
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(StopWordFilter::remove(stops))
        .filter(Stemmer::new(Language::English))
        .build()
}

impl KeywordIndex {
    /// Opens the index in `dir`, creating it (or recreating it, when the
    /// schema changed or any of its files is unreadable or fails its
    /// checksum) as needed. Returns the store generation it was last
    /// committed at, if any. The index is derived from the store: damage
    /// here is rebuilt, never a reason not to start.
    pub fn open(dir: &Path) -> Result<(KeywordIndex, Option<u64>), KeywordError> {
        match KeywordIndex::open_existing(dir) {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => {}
            Err(err) => tracing::warn!(
                dir = %dir.display(),
                "the keyword index is damaged ({err}); it is rebuilt from the store"
            ),
        }
        let created = (|| {
            // A file where a folder of ours belongs (`index` itself) goes too.
            if let Some(parent) = dir.parent()
                && parent.is_file()
            {
                std::fs::remove_file(parent)?;
            }
            remove_any(dir)?;
            std::fs::create_dir_all(dir)?;
            let (schema, _) = schema();
            Index::create_in_dir(dir, schema)?;
            match KeywordIndex::open_existing(dir)? {
                Some(created) => Ok(created),
                None => Err(KeywordError::Tantivy(tantivy::TantivyError::InternalError(
                    "a new keyword index could not be opened".into(),
                ))),
            }
        })();
        // Derived data is no reason not to start (a full disk, no inodes
        // left, a read-only data dir): the index is built in memory from
        // the store, and written to disk at a start that can.
        created.or_else(|err| {
            tracing::warn!(
                dir = %dir.display(),
                "cannot write the keyword index ({err}); it is kept in memory until a start that can write it"
            );
            let (schema, fields) = schema();
            KeywordIndex::from_index(Index::create_in_ram(schema), fields, None)
        })
    }

    /// The index in `dir` if there is a sound one of this schema; `None`
    /// when there is none (or of another schema), an error when it is
    /// damaged.
    fn open_existing(dir: &Path) -> Result<Option<(KeywordIndex, Option<u64>)>, KeywordError> {
        let (schema, fields) = schema();
        if !dir.join("meta.json").is_file() {
            return Ok(None);
        }
        let index = Index::open_in_dir(dir)?;
        if index.schema() != schema {
            return Ok(None);
        }
        // Every file's footer checksum: a damaged segment is found here,
        // not by the first search or sync that reads it.
        let damaged = index.validate_checksum()?;
        if !damaged.is_empty() {
            return Err(KeywordError::Io(std::io::Error::other(format!(
                "{} file(s) fail their checksum",
                damaged.len()
            ))));
        }
        KeywordIndex::from_index(index, fields, Some(dir.to_path_buf())).map(Some)
    }

    /// The index over an opened tantivy index, and the store generation it
    /// was last synced to.
    fn from_index(
        index: Index,
        fields: Fields,
        dir: Option<PathBuf>,
    ) -> Result<(KeywordIndex, Option<u64>), KeywordError> {
        index.tokenizers().register(ANALYZER, analyzer(&[]));
        let generation = index
            .load_metas()?
            .payload
            .and_then(|payload| payload.parse::<u64>().ok());
        let writer = index.writer_with_num_threads(1, WRITER_MEMORY)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok((
            KeywordIndex {
                dir,
                fields,
                opened: RwLock::new(Arc::new(Opened {
                    index,
                    reader,
                    writer: Mutex::new(Some(writer)),
                })),
                query_analyzer: Mutex::new(analyzer(QUERY_FILLER)),
            },
            generation,
        ))
    }

    fn opened(&self) -> Arc<Opened> {
        match self.opened.read() {
            Ok(opened) => Arc::clone(&opened),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Empties the index for a rebuild. Its folder deleted under a running
    /// daemon is made anew: tantivy cannot write its files where the
    /// folder was, and every sync would fail until a restart.
    pub fn start_over(&self) -> Result<(), KeywordError> {
        if let Some(dir) = &self.dir
            && !dir.join("meta.json").is_file()
        {
            tracing::warn!(
                dir = %dir.display(),
                "the keyword index's files are gone; making it anew"
            );
            let (fresh, _) = KeywordIndex::open(dir)?;
            let opened = fresh.opened();
            match self.opened.write() {
                Ok(mut slot) => *slot = opened,
                Err(poisoned) => *poisoned.into_inner() = opened,
            }
            return Ok(());
        }
        self.clear()
    }

    /// Every tool id in the index with its definition hash.
    pub fn documents(&self) -> Result<Vec<(String, String)>, KeywordError> {
        let searcher = self.opened().reader.searcher();
        let mut out = Vec::new();
        for segment in searcher.segment_readers() {
            let store = segment.get_store_reader(64)?;
            for doc_id in segment.doc_ids_alive() {
                let doc: TantivyDocument = store.get(doc_id)?;
                let id = doc.get_first(self.fields.id).and_then(|v| v.as_str());
                let hash = doc.get_first(self.fields.hash).and_then(|v| v.as_str());
                if let (Some(id), Some(hash)) = (id, hash) {
                    out.push((id.to_owned(), hash.to_owned()));
                }
            }
        }
        Ok(out)
    }

    fn with_writer<T>(
        &self,
        f: impl FnOnce(&mut IndexWriter) -> Result<T, KeywordError>,
    ) -> Result<T, KeywordError> {
        let opened = self.opened();
        let mut slot = opened
            .writer
            .lock()
            .map_err(|_| tantivy::TantivyError::InternalError("writer lock poisoned".into()))?;
        let writer = match slot.as_mut() {
            Some(writer) => writer,
            None => slot.insert(opened.index.writer_with_num_threads(1, WRITER_MEMORY)?),
        };
        let result = f(writer);
        if result.is_err() {
            // Its uncommitted changes go with it; the caller's sync fails
            // and is run again (maintenance.rs).
            *slot = None;
        }
        result
    }

    pub fn clear(&self) -> Result<(), KeywordError> {
        self.with_writer(|w| {
            w.delete_all_documents()?;
            Ok(())
        })
    }

    /// Adds or replaces tools (visible after `commit`).
    pub fn upsert(&self, docs: &[KeywordDoc<'_>]) -> Result<(), KeywordError> {
        let f = self.fields;
        self.with_writer(|w| {
            for doc in docs {
                w.delete_term(Term::from_field_text(f.id, doc.tool_id));
                let mut d = TantivyDocument::default();
                d.add_text(f.id, doc.tool_id);
                d.add_text(f.server_id, doc.server_id);
                d.add_text(f.hash, doc.hash);
                d.add_text(f.name, &doc.texts.name);
                d.add_text(f.server, &doc.texts.server);
                d.add_text(f.all, &doc.texts.all);
                w.add_document(d)?;
            }
            Ok(())
        })
    }

    pub fn remove(&self, tool_ids: &[String]) -> Result<(), KeywordError> {
        let f = self.fields;
        self.with_writer(|w| {
            for id in tool_ids {
                w.delete_term(Term::from_field_text(f.id, id));
            }
            Ok(())
        })
    }

    /// Makes the changes durable and visible, recording what they reflect
    /// (a store generation, or a marker that matches none).
    pub fn commit_with(&self, payload: &str) -> Result<(), KeywordError> {
        self.with_writer(|w| {
            let mut prepared = w.prepare_commit()?;
            prepared.set_payload(payload);
            prepared.commit()?;
            Ok(())
        })?;
        self.opened().reader.reload()?;
        Ok(())
    }

    /// The query's words after the analyzer (for callers that want to know
    /// whether anything searchable is left).
    fn query_terms(&self, query: &str) -> Vec<String> {
        let Ok(mut analyzer) = self.query_analyzer.lock() else {
            return Vec::new();
        };
        let text = with_split_identifiers(query);
        let mut stream = analyzer.token_stream(&text);
        let mut terms = Vec::new();
        while stream.advance() {
            let word = stream.token().text.clone();
            if !terms.contains(&word) {
                terms.push(word);
            }
        }
        terms
    }

    /// BM25 over the fields, best first; `servers` limits the result to
    /// those server ids.
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        servers: Option<&HashSet<String>>,
    ) -> Result<Vec<(String, f32)>, KeywordError> {
        self.search_expanded(query, &[], 0.0, limit, servers)
    }

    /// `search` with more words (other names of the query's words) that
    /// count `extra_weight` times as much as the query's own.
    pub fn search_expanded(
        &self,
        query: &str,
        extra: &[&str],
        extra_weight: f32,
        limit: usize,
        servers: Option<&HashSet<String>>,
    ) -> Result<Vec<(String, f32)>, KeywordError> {
        let f = self.fields;
        let terms = self.query_terms(query);
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let mut weighted: Vec<(String, f32)> = terms.iter().map(|t| (t.clone(), 1.0)).collect();
        if extra_weight > 0.0 {
            for word in self.query_terms(&extra.join(" ")) {
                if !weighted.iter().any(|(t, _)| *t == word) {
                    weighted.push((word, extra_weight));
                }
            }
        }
        let mut should: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(weighted.len() * 3);
        for (word, weight) in &weighted {
            for (field, boost) in [
                (f.all, BOOST_ALL),
                (f.name, BOOST_NAME),
                (f.server, BOOST_SERVER),
            ] {
                let term = TermQuery::new(
                    Term::from_field_text(field, word),
                    IndexRecordOption::WithFreqs,
                );
                should.push((
                    Occur::Should,
                    Box::new(BoostQuery::new(Box::new(term), boost * weight)),
                ));
            }
        }
        let text_query: Box<dyn Query> = Box::new(BooleanQuery::new(should));
        let query: Box<dyn Query> = match servers {
            Some(servers) => Box::new(BooleanQuery::new(vec![
                (Occur::Must, text_query),
                (
                    Occur::Must,
                    Box::new(ConstScoreQuery::new(
                        Box::new(TermSetQuery::new(
                            servers
                                .iter()
                                .map(|id| Term::from_field_text(f.server_id, id)),
                        )),
                        0.0,
                    )),
                ),
            ])),
            None => text_query,
        };
        let searcher = self.opened().reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(limit).order_by_score())?;
        let mut out = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address)?;
            if let Some(id) = doc.get_first(f.id).and_then(|v| v.as_str()) {
                out.push((id.to_owned(), score));
            }
        }
        Ok(out)
    }

    pub fn num_docs(&self) -> u64 {
        self.opened().reader.searcher().num_docs()
    }
}
