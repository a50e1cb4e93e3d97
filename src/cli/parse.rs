//! The value parsers of the command line's own forms (an http(s) URL,
//! decimal seconds, a point in time): clap calls them, and what they
//! return as an error is the message a user sees (exit code 2).

/// An http(s) URL, as given.
pub(super) fn http_url(text: &str) -> Result<String, String> {
    match url::Url::parse(text) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
            Ok(text.to_owned())
        }
        _ => Err(format!(
            "{text:?} is not an http(s) URL (e.g. http://localhost:4318)"
        )),
    }
}

/// Seconds as a decimal number (`0.5`, `30`), at least 10 ms.
pub(super) fn seconds(text: &str) -> Result<std::time::Duration, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !value.is_finite() || !(0.01..=86_400.0).contains(&value) {
        return Err(format!("{text} s is out of range (0.01 to 86400)"));
    }
    Ok(std::time::Duration::from_secs_f64(value))
}

/// A time as RFC 3339, or as an age before now (`15m`).
pub(super) fn point_in_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let text = text.trim();
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&chrono::Utc));
    }
    let split = text.len().saturating_sub(1);
    let (number, unit) = (
        text.get(..split).unwrap_or(""),
        text.get(split..).unwrap_or(""),
    );
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    match number.parse::<i64>() {
        Ok(n) if unit_secs > 0 && (0..=36_500 * 86_400 / unit_secs).contains(&n) => {
            Ok(chrono::Utc::now() - chrono::Duration::seconds(n * unit_secs))
        }
        _ => Err(format!(
            "{text:?} is neither an RFC 3339 time (2026-11-26T14:00:00Z) nor an age (90s, 15m, 2h, 7d)"
        )),
    }
}
