//! How people name software actions and things, and how tools name them:
//! groups of words that mean the same to someone looking for a tool
//! ("ticket" for an issue, "PR" for a pull request, "DM" for a direct
//! message). A query's words are expanded with the rest of their group on
//! the keyword side, at a lower weight than the words typed, so a
//! paraphrase finds the tool that uses the other word.

/// Each group: phrases that name the same thing. Lowercase; multi-word
/// phrases match as whole words in order.
const GROUPS: &[&[&str]] = &[
    &["ticket", "issue", "bug", "bug report"],
    &["pull request", "pr", "merge request", "mr"],
    &["repo", "repository"],
    &["dm", "direct message", "private message"],
    &["history", "log", "commits"],
    &["folder", "directory"],
    &["delete", "remove", "erase", "drop"],
    &["e-mail", "email", "mail", "inbox"],
    &["web page", "webpage", "website", "site", "url", "page"],
    &["k8s", "kubernetes", "kubectl"],
    &["db", "database"],
    &["screenshot", "screen capture", "snapshot"],
    &["meeting", "event", "appointment"],
    &["to-do", "todo", "task"],
    &["chat", "channel", "message", "slack"],
    &["note", "page", "doc", "document"],
    &[
        "errors",
        "exceptions",
        "crashes",
        "error",
        "exception",
        "crash",
    ],
    &["search the web", "google", "look up online", "web search"],
    &["directions", "route", "navigate to"],
    &["place", "location", "address"],
    &["picture", "image", "photo"],
    &["remember", "memorize", "store a fact", "memory"],
    &["run sql", "query", "sql"],
    &["staged", "stage", "add to index"],
    &["branch", "fork"],
    &["user", "member", "person", "account"],
    &["comment", "reply", "note"],
    &["scrape", "crawl", "extract", "fetch"],
    &["upload", "attach", "attachment"],
    &["click", "press", "tap"],
    &["deploy", "release", "ship"],
    &["forecast", "weather"],
    &["transcript", "captions", "subtitles"],
];

/// The words to add to `query`: every other phrase of each group one of
/// the query's phrases belongs to (not already in the query).
pub fn expansions(query: &str) -> Vec<&'static str> {
    let words: Vec<String> = query
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    let contains = |phrase: &str| {
        let parts: Vec<&str> = phrase.split(' ').collect();
        words.windows(parts.len()).any(|w| w == parts.as_slice())
    };
    let mut out: Vec<&'static str> = Vec::new();
    for group in GROUPS {
        if group.iter().any(|phrase| contains(phrase)) {
            for phrase in group.iter().copied() {
                if !contains(phrase) && !out.contains(&phrase) {
                    out.push(phrase);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_gains_the_other_names_of_what_it_says() {
        let more = expansions("Open a PR for my fix");
        assert!(more.contains(&"pull request") && more.contains(&"merge request"));
        assert!(!more.contains(&"pr"));
        let more = expansions("send a DM to Ana");
        assert!(more.contains(&"direct message"));
        // Whole words only: "production" is not "pr".
        assert!(
            expansions("production outage")
                .iter()
                .all(|w| *w != "pull request")
        );
        assert!(expansions("").is_empty());
    }
}
