//! Argument checks, pure: a tool's `inputSchema` compiled (offline: a
//! `$ref` outside the schema fails the compilation and is never fetched;
//! `format` not asserted; `pattern` with a backtracking limit) and a
//! call's arguments judged against it, each problem named as a JSON
//! pointer into the arguments. The router decides when to check and keeps
//! the compiled schemas.
//!
//! Schemas are JSON Schema 2020-12 unless their `$schema` names an older
//! draft.

use serde_json::Value;
use serde_json::value::RawValue;

/// Problems reported for one call; the first few are what a caller reads.
const REPORTED: usize = 16;
/// Longest message per problem (a message may quote a long value).
const MESSAGE_CHARS: usize = 300;
/// Backtracking steps a `pattern` may take per match, so a hostile
/// pattern cannot stall a call.
const BACKTRACK_LIMIT: usize = 100_000;

/// One way a call's arguments do not match the schema.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ArgumentProblem {
    /// The field, as a JSON pointer into the arguments (`/count`; for a
    /// missing required field, where it should be).
    pub path: String,
    pub message: String,
    /// The schema keyword that failed (`type`, `required`, …).
    pub keyword: String,
    /// Where in the schema (a JSON pointer).
    #[serde(rename = "schemaPath")]
    pub schema_path: String,
    /// The message without the values the caller sent, for logs.
    #[serde(skip)]
    pub masked: String,
}

/// The first problem (and how many more), values shown or `masked`.
pub fn summary(problems: &[ArgumentProblem], masked: bool) -> String {
    let Some(first) = problems.first() else {
        return "they do not match the tool's input schema".to_owned();
    };
    let message = if masked {
        &first.masked
    } else {
        &first.message
    };
    let at = if first.path.is_empty() {
        String::new()
    } else {
        format!("{}: ", first.path)
    };
    match problems.len() {
        1 => format!("{at}{message}"),
        n => format!("{at}{message} (and {} more)", n - 1),
    }
}

/// A tool's input schema, compiled, or why it could not be.
pub enum Schema {
    Checks(Box<jsonschema::Validator>),
    Unusable(String),
}

pub fn compile(definition: &RawValue) -> Schema {
    let Some(schema) = crate::model::tool::definition_field(definition, "inputSchema") else {
        return Schema::Unusable("the definition has no readable inputSchema".to_owned());
    };
    let options = jsonschema::options()
        .offline()
        .should_validate_formats(false)
        .with_pattern_options(
            jsonschema::PatternOptions::fancy_regex().backtrack_limit(BACKTRACK_LIMIT),
        );
    match options.build(&schema) {
        Ok(validator) => Schema::Checks(Box::new(validator)),
        Err(err) => Schema::Unusable(cut(&err.to_string())),
    }
}

pub fn check(validator: &jsonschema::Validator, arguments: &Value) -> Vec<ArgumentProblem> {
    // Most calls match: answered without building any error.
    if validator.is_valid(arguments) {
        return Vec::new();
    }
    validator
        .iter_errors(arguments)
        .take(REPORTED)
        .map(|error| {
            let mut path = error.instance_path().as_str().to_owned();
            // A missing field is named where it should be.
            if let jsonschema::error::ValidationErrorKind::Required { property } = error.kind()
                && let Some(name) = property.as_str()
            {
                path.push('/');
                path.push_str(&name.replace('~', "~0").replace('/', "~1"));
            }
            ArgumentProblem {
                path,
                message: cut(&error.to_string()),
                keyword: error.kind().keyword().to_owned(),
                schema_path: error.schema_path().as_str().to_owned(),
                masked: cut(&error.masked().to_string()),
            }
        })
        .collect()
}

fn cut(text: &str) -> String {
    match text.char_indices().nth(MESSAGE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
