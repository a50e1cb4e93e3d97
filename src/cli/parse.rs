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

/// One `--pin` selector, checked as it is read.
pub(super) fn pin_selector(text: &str) -> Result<String, String> {
    crate::model::pinned_tools::PinnedTools::parse(&[text.to_owned()]).map(|_| text.to_owned())
}

/// A replica's id: 1 to 64 letters, digits, `.`, `_`, `:` or `-` (it is
/// a metrics label and part of log lines).
pub(super) fn replica_id(text: &str) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
    if (1..=64).contains(&text.len()) && text.chars().all(allowed) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a replica id: use 1 to 64 letters, digits, `.`, `_`, `:` or `-` (e.g. edge-1)"
        ))
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

/// A length of time in humantime's forms (`30s`, `5m`, `1h 30m`), or bare
/// seconds; at most a week.
pub(super) fn duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let parsed = match text.parse::<u64>() {
        Ok(secs) => Ok(std::time::Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(text),
    };
    match parsed {
        Ok(length) if length <= std::time::Duration::from_secs(7 * 86_400) => Ok(length),
        Ok(_) => Err(format!("{text} is longer than a week")),
        Err(_) => Err(format!(
            "{text:?} is not a length of time (e.g. 30s, 5m, 1h)"
        )),
    }
}

/// The oldest age `point_in_time` takes: a hundred years.
const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(36_500 * 86_400);

/// A time as RFC 3339, or as an age before now (`15m`, in humantime's
/// forms: `90s`, `2h`, `7d`, `1h 30m`).
pub(super) fn point_in_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let text = text.trim();
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&chrono::Utc));
    }
    match humantime::parse_duration(text)
        .ok()
        .filter(|age| *age <= MAX_AGE)
        .and_then(|age| chrono::Duration::from_std(age).ok())
    {
        Some(age) => Ok(chrono::Utc::now() - age),
        None => Err(format!(
            "{text:?} is neither an RFC 3339 time (2026-11-26T14:00:00Z) nor an age (90s, 15m, 2h, 7d)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_of_time_is_humantime_or_seconds() {
        let secs = |text: &str| duration(text).unwrap().as_secs();
        assert_eq!(secs("5m"), 300);
        assert_eq!(secs("0s"), 0);
        assert_eq!(secs("90"), 90);
        assert_eq!(secs("1h 30m"), 5400);
        for bad in ["soon", "-5m", "8d", ""] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_age_or_an_rfc_3339_time_is_a_point_in_time() {
        let now = chrono::Utc::now();
        let age = |text: &str| (now - point_in_time(text).unwrap()).num_seconds();
        for (text, secs) in [
            ("90s", 90),
            ("15m", 900),
            ("2h", 7200),
            ("7d", 604_800),
            ("1h", 3600),
            ("0s", 0),
            (" 15m ", 900),
            ("015m", 900),
            ("36500d", 36_500 * 86_400),
        ] {
            assert!((age(text) - secs).abs() <= 5, "{text}");
        }
        assert_eq!(
            point_in_time("2026-11-26T14:00:00Z").unwrap().to_rfc3339(),
            "2026-11-26T14:00:00+00:00"
        );
        for bad in ["yesterday", "15x", "15", "", "m", "-5m", "36501d"] {
            let err = point_in_time(bad).unwrap_err();
            assert!(
                err.contains("RFC 3339") && err.contains("(90s, 15m, 2h, 7d)"),
                "{bad}: {err}"
            );
        }
    }
}
