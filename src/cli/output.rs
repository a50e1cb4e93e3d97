//! Human-readable output: tables for lists, aligned fields for one item.

use crate::model::printable::printable;
use comfy_table::{ContentArrangement, Table, presets};
use serde_json::Value;

/// A borderless table that fits the terminal.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(headers.iter().copied());
    for row in rows {
        table.add_row(row.iter().map(|cell| cell_text(cell)));
    }
    table
        .to_string()
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `key: value` lines, keys aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {}", printable(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A JSON value as short text: strings bare, null as "-".
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => printable(s),
        other => other.to_string(),
    }
}

/// `value[key]` as short text.
pub fn field(value: &Value, key: &str) -> String {
    text(value.get(key).unwrap_or(&Value::Null))
}

/// Longest a table cell is shown (a 100,000-character tool name would
/// otherwise widen every row).
const CELL_CHARS: usize = 200;

fn cell_text(cell: &str) -> String {
    let shown = printable(cell);
    match shown.char_indices().nth(CELL_CHARS) {
        Some((cut, _)) => format!("{}…", &shown[..cut]),
        None => shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::printable::is_hostile;

    #[test]
    fn a_servers_text_cannot_drive_the_terminal() {
        let hostile = "ok\u{1b}[2J\u{1b}]52;c;aGk=\u{7}\nFAKE ROW\u{202e}txt";
        let shown = printable(hostile);
        assert!(!shown.chars().any(is_hostile), "{shown}");
        assert!(shown.starts_with("ok\\u{1b}[2J"), "{shown}");
        assert_eq!(printable("plain name_1 é"), "plain name_1 é");
        let listed = table(
            &["NAME"],
            vec![vec![hostile.to_owned()], vec!["x".repeat(5000)]],
        );
        assert_eq!(listed.lines().count(), 3, "{listed}");
        assert!(
            listed.lines().all(|l| l.chars().count() < CELL_CHARS + 10),
            "{listed}"
        );
    }
}
