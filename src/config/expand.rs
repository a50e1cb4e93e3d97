//! Environment-variable expansion in config strings: `$VAR`, `${VAR}`,
//! `${VAR:-default}`, `${env:VAR}` (VS Code) and `$$` for a literal `$`.

/// Why a string could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandError {
    /// A referenced variable is not set (and has no default).
    Missing(String),
    /// `${...}` that is unterminated or of a kind we do not support
    /// (e.g. VS Code's `${input:...}`).
    Unsupported(String),
}

/// Expands `value`, looking variables up with `lookup`.
///
/// Bare `$VAR` takes an upper-case name (`[A-Z_][A-Z0-9_]*`), as shells do
/// and as config files are specified to, so `$5` or `cost in $` stay as
/// they are; braces take any
/// identifier.
pub fn expand(value: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner_start) = after.strip_prefix('{') {
            let Some(end) = inner_start.find('}') else {
                return Err(ExpandError::Unsupported(format!("${{{inner_start}")));
            };
            let inner = &inner_start[..end];
            out.push_str(&expand_braced(inner, lookup)?);
            rest = &inner_start[end + 1..];
        } else {
            let name_len = after
                .char_indices()
                .take_while(|&(i, c)| {
                    c == '_' || c.is_ascii_uppercase() || (i > 0 && c.is_ascii_digit())
                })
                .count();
            if name_len == 0 {
                out.push('$');
                rest = after;
            } else {
                let name = &after[..name_len];
                out.push_str(&lookup(name).ok_or_else(|| ExpandError::Missing(name.to_owned()))?);
                rest = &after[name_len..];
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn expand_braced(
    inner: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let (name, default) = match inner.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (inner, None),
    };
    let name = name.strip_prefix("env:").unwrap_or(name);
    if !is_identifier(name) {
        return Err(ExpandError::Unsupported(format!("${{{inner}}}")));
    }
    match (lookup(name), default) {
        // `:-` also replaces an empty value, as in POSIX shells.
        (Some(value), Some(default)) if value.is_empty() => Ok(default.to_owned()),
        (Some(value), _) => Ok(value),
        (None, Some(default)) => Ok(default.to_owned()),
        (None, None) => Err(ExpandError::Missing(name.to_owned())),
    }
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/me".into()),
            "TOKEN" => Some("t0k".into()),
            "EMPTY" => Some(String::new()),
            "lower_case" => Some("lc".into()),
            _ => None,
        }
    }

    fn x(value: &str) -> Result<String, ExpandError> {
        expand(value, &env)
    }

    #[test]
    fn every_form_expands() {
        assert_eq!(x("$HOME/data").unwrap(), "/home/me/data");
        assert_eq!(x("${HOME}/data").unwrap(), "/home/me/data");
        assert_eq!(x("Bearer ${TOKEN}").unwrap(), "Bearer t0k");
        assert_eq!(x("${env:TOKEN}").unwrap(), "t0k");
        assert_eq!(x("${UNSET:-fallback}").unwrap(), "fallback");
        assert_eq!(x("${UNSET:-}").unwrap(), "");
        assert_eq!(x("${TOKEN:-fallback}").unwrap(), "t0k");
        assert_eq!(x("${EMPTY:-fallback}").unwrap(), "fallback");
        assert_eq!(x("${lower_case}").unwrap(), "lc");
        assert_eq!(x("$HOME$TOKEN").unwrap(), "/home/met0k");
    }

    #[test]
    fn literal_dollars_stay() {
        assert_eq!(x("no variables").unwrap(), "no variables");
        assert_eq!(x("costs $5").unwrap(), "costs $5");
        assert_eq!(x("ends with $").unwrap(), "ends with $");
        assert_eq!(x("$$HOME").unwrap(), "$HOME");
        assert_eq!(x("$lower").unwrap(), "$lower");
        assert_eq!(x("ünïcödé $TOKEN ✓").unwrap(), "ünïcödé t0k ✓");
    }

    #[test]
    fn missing_and_unsupported_are_errors() {
        assert_eq!(x("$NOPE"), Err(ExpandError::Missing("NOPE".into())));
        assert_eq!(x("a ${NOPE} b"), Err(ExpandError::Missing("NOPE".into())));
        assert_eq!(x("${env:NOPE}"), Err(ExpandError::Missing("NOPE".into())));
        assert!(matches!(
            x("${input:token}"),
            Err(ExpandError::Unsupported(_))
        ));
        assert!(matches!(x("${UNCLOSED"), Err(ExpandError::Unsupported(_))));
        assert!(matches!(x("${}"), Err(ExpandError::Unsupported(_))));
    }
}
