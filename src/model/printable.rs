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

#[cfg(test)]
mod tests {
    use super::*;

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
