//! Text from outside (a server's names, errors, stderr) as a terminal or
//! a log line may show it: control characters (escape sequences that clear
//! the screen or write the clipboard, line breaks that forge rows or log
//! lines) and bidirectional overrides are written as `\u{…}` escapes
//! instead of acted on.

/// `text` with every hostile character escaped; the same text, unchanged,
/// when it has none.
pub fn printable(text: &str) -> String {
    if !text.chars().any(is_hostile) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| match is_hostile(c) {
            true => c.escape_unicode().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// A character a terminal acts on instead of showing.
pub fn is_hostile(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// How many of a client's names an error echoes back.
const SHOWN_NAMES: usize = 10;
/// How much of each.
const SHOWN_NAME_CHARS: usize = 64;

/// Names a client sent, echoed in an error: quoted, escaped, the first
/// few and how many more (a request naming thousands would otherwise get
/// its whole list back, into a model's context).
pub fn quoted_names(names: &[&str]) -> String {
    let mut shown: Vec<String> = names
        .iter()
        .take(SHOWN_NAMES)
        .map(|name| {
            let cut: String = name.chars().take(SHOWN_NAME_CHARS).collect();
            let more = if cut.len() < name.len() { "…" } else { "" };
            format!("'{}{more}'", printable(&cut))
        })
        .collect();
    if names.len() > SHOWN_NAMES {
        shown.push(format!("and {} more", names.len() - SHOWN_NAMES));
    }
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_of_names_is_cut_to_its_first_few() {
        assert_eq!(quoted_names(&["a", "b"]), "'a', 'b'");
        let many: Vec<String> = (0..40_000).map(|n| format!("s{n}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let shown = quoted_names(&many);
        assert!(shown.ends_with("'s9', and 39990 more"), "{shown}");
        let long = "x".repeat(1000);
        assert_eq!(quoted_names(&[&long]).len(), 64 + 3 + 2);
    }

    #[test]
    fn hostile_characters_are_escaped_and_plain_text_kept() {
        let hostile = "ok\u{1b}[2J\u{1b}]52;c;aGk=\u{7}\nFAKE ROW\u{202e}txt";
        let shown = printable(hostile);
        assert!(!shown.chars().any(is_hostile), "{shown}");
        assert!(shown.starts_with("ok\\u{1b}[2J"), "{shown}");
        assert!(shown.contains("\\u{a}FAKE ROW\\u{202e}txt"), "{shown}");
        assert_eq!(printable("plain name_1 é"), "plain name_1 é");
    }
}
