//! Credentials people put in URLs (`https://user:pw@host/…`,
//! `?token=…`, `?api_key=…`) hidden wherever a URL is shown: the admin API,
//! error messages, the connection history, the log. The store seals such
//! URLs whole (see `store::put_server`).

use super::server::REDACTED;

/// Query parameter names whose values are secrets (compared without case,
/// `-` and `_`): exact names, then names ending in one of the suffixes.
const SECRET_PARAMS: &[&str] = &[
    "token",
    "accesstoken",
    "apikey",
    "key",
    "secret",
    "clientsecret",
    "password",
    "passwd",
    "pwd",
    "pass",
    "auth",
    "authorization",
    "code",
    "sig",
    "signature",
    "credential",
    "credentials",
    "session",
    "sessionid",
    "jwt",
    "bearer",
];
const SECRET_SUFFIXES: &[&str] = &["token", "key", "secret", "password", "signature"];

/// Whether a query parameter's value is a secret.
pub fn is_secret_param(name: &str) -> bool {
    let folded: String = name
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_PARAMS.contains(&folded.as_str()) || SECRET_SUFFIXES.iter().any(|s| folded.ends_with(s))
}

/// Whether a URL carries a credential (userinfo or a secret parameter).
pub fn url_has_secrets(raw: &str) -> bool {
    redact_url(raw) != raw
}

/// The URL with its userinfo and secret query values replaced by `***`.
/// Text that does not parse as a URL loses everything between `//` and `@`.
pub fn redact_url(raw: &str) -> String {
    let Ok(mut url) = url::Url::parse(raw) else {
        return redact_unparsed(raw);
    };
    if url.cannot_be_a_base() {
        return raw.to_owned();
    }
    let mut changed = false;
    if !url.username().is_empty() {
        let _ = url.set_username(REDACTED);
        changed = true;
    }
    if url.password().is_some() {
        let _ = url.set_password(Some(REDACTED));
        changed = true;
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if pairs.iter().any(|(k, _)| is_secret_param(k)) {
            let mut query = url.query_pairs_mut();
            query.clear();
            for (key, value) in &pairs {
                let shown = if is_secret_param(key) {
                    REDACTED
                } else {
                    value
                };
                query.append_pair(key, shown);
            }
            drop(query);
            changed = true;
        }
    }
    if changed {
        url.to_string()
    } else {
        raw.to_owned()
    }
}

fn redact_unparsed(raw: &str) -> String {
    match (raw.find("//"), raw.rfind('@')) {
        (Some(start), Some(at)) if at > start + 2 => {
            format!("{}{REDACTED}{}", &raw[..start + 2], &raw[at..])
        }
        _ => raw.to_owned(),
    }
}

/// Longest reason kept: an error's text is the server's to shape (a 30 MB
/// `initialize` error, an SSE endpoint of 30 MB), and it goes into the
/// store, the connection history, the log and every view of the server.
pub const REASON_CHARS: usize = 2_000;

/// `text` cut to its first `chars` characters.
fn prefix(text: &str, chars: usize) -> &str {
    match text.char_indices().nth(chars) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// `shown` (the start of a text `whole` bytes long) cut to
/// `REASON_CHARS`, saying how long the whole was when it was cut.
fn cut_to_reason(shown: &str, whole: usize) -> String {
    let kept = prefix(shown, REASON_CHARS);
    if kept.len() == whole {
        kept.to_owned()
    } else {
        format!("{kept}… ({whole} bytes in all)")
    }
}

/// A reason cut to `REASON_CHARS` (the store's last guard; what reaches it
/// is already redacted).
pub fn cut_reason(text: &str) -> String {
    cut_to_reason(text, text.len())
}

/// A reason as it is logged, stored and shown: the credentials a URL in it
/// carried hidden, and cut to `REASON_CHARS`.
pub fn shown_reason(text: &str) -> String {
    // Only the start is redacted: what is cut off is never shown.
    let head = prefix(text, REASON_CHARS * 2);
    let redacted = redact_text(head);
    let whole = if head.len() == text.len() {
        redacted.len()
    } else {
        text.len()
    };
    cut_to_reason(&redacted, whole)
}

/// Free text (an error message) with every `http://` / `https://` URL in it
/// redacted.
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let next = ["http://", "https://"]
            .iter()
            .filter_map(|scheme| {
                rest.to_ascii_lowercase()
                    .find(scheme)
                    .map(|pos| (pos, *scheme))
            })
            .min_by_key(|(pos, _)| *pos);
        let Some((start, _)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')' | ']')
            })
            .unwrap_or(tail.len());
        // A trailing sentence mark is not part of the URL.
        let url = tail[..end].trim_end_matches(['.', ',', ';', ':']);
        out.push_str(&redact_url(url));
        rest = &tail[url.len()..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_cut_and_says_how_long_it_was() {
        let short = "connect failed: https://user:secret@example.com/mcp";
        assert_eq!(shown_reason(short), redact_text(short));
        let huge = format!("https://user:secret@example.com/x?{}", "A".repeat(30 << 20));
        let shown = shown_reason(&huge);
        assert!(shown.chars().count() < REASON_CHARS + 40, "{}", shown.len());
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.ends_with(&format!("({} bytes in all)", huge.len())),
            "{shown}"
        );
        let cut = cut_reason(&"é".repeat(5_000));
        assert!(cut.starts_with(&"é".repeat(REASON_CHARS)) && cut.contains("10000 bytes in all"));
    }

    #[test]
    fn userinfo_and_secret_parameters_are_hidden() {
        assert_eq!(
            redact_url("https://user:pw@example.com/mcp"),
            "https://***:***@example.com/mcp"
        );
        assert_eq!(
            redact_url("https://ghp_token@example.com/sse"),
            "https://***@example.com/sse"
        );
        let shown =
            redact_url("http://h:1/sse?token=abc&x=1&api_key=k2&X-Api-Key=k3&client_secret=s");
        for secret in ["abc", "k2", "k3", "=s"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("x=1"), "{shown}");
        for plain in ["https://example.com/mcp", "http://127.0.0.1:8/sse?page=2"] {
            assert_eq!(redact_url(plain), plain);
            assert!(!url_has_secrets(plain));
        }
        assert!(url_has_secrets("https://a:b@h/"));
    }

    #[test]
    fn urls_inside_messages_are_redacted() {
        let message = "cannot reach https://u:hunter2@h.example/mcp?token=t0k: connection refused (see http://docs.example/x).";
        let shown = redact_text(message);
        assert!(
            !shown.contains("hunter2") && !shown.contains("t0k"),
            "{shown}"
        );
        assert!(
            shown.ends_with("connection refused (see http://docs.example/x)."),
            "{shown}"
        );
        assert_eq!(redact_text("no url here"), "no url here");
        assert_eq!(redact_text("HTTPS://a:b@h/"), "https://***:***@h/");
    }

    #[test]
    fn text_that_is_not_a_url_still_loses_its_userinfo() {
        assert_eq!(redact_url("http://user:pw@[bad/"), "http://***@[bad/");
    }

    #[test]
    fn secret_parameter_names() {
        for name in [
            "token",
            "access_token",
            "api-key",
            "APIKEY",
            "sig",
            "refreshToken",
            "x_secret",
        ] {
            assert!(is_secret_param(name), "{name}");
        }
        for name in ["page", "limit", "q", "cursor", "format"] {
            assert!(!is_secret_param(name), "{name}");
        }
    }
}
