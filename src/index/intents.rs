//! Requests that ask for several things at once ("Find the anime with ID 5.
//! Also search movies with the keyword comedy"): the request cut into its
//! intents, so that each can bring its own tools up. Pure text rules, no
//! model: sentences, enumerations and list items, connectives ("also",
//! "then", "as well as"), and "and" or a comma before a request verb.
//! A piece too small to be a request of its own stays with its neighbour,
//! a later sentence that opens no request ("Use port 5432.", "Today is
//! Monday.") stays with the one it adds to, and a sentence that only sets
//! the scene ("I run a small bakery") is no intent; a request with fewer
//! than two intents is left whole.

use regex::Regex;
use std::sync::LazyLock;

/// At most this many intents are searched for one request.
pub const MAX_INTENTS: usize = 4;

/// The request's intents, in order; a single element (the request as
/// given) when it asks for one thing.
pub fn intents(query: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    for sentence in with_details(list_items(query)) {
        for clause in at_connectives(&sentence) {
            pieces.extend(at_request_verbs(&clause));
        }
    }
    let pieces = merge_small(pieces);
    let requests: Vec<String> = pieces
        .into_iter()
        .map(|p| clean(&p))
        .filter(|p| !p.is_empty() && !sets_the_scene(p) && has_substance(p))
        .collect();
    if requests.len() < 2 {
        return vec![query.trim().to_owned()];
    }
    let mut requests = requests;
    if requests.len() > MAX_INTENTS {
        // The tail is searched as one: nothing the request asks is dropped.
        let tail = requests.split_off(MAX_INTENTS - 1).join(" ");
        requests.push(tail);
    }
    requests
}

/// The request's sentences, each later one that does not open a request
/// of its own ("Use port 5432.", "Today is Monday.", "I want max 50
/// results.") joined to the one before: it says more about that one. An
/// enumerated or bulleted item opens a request whatever its words.
fn with_details(items: ListItems) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items.lines {
        for (position, sentence) in sentences(&item).into_iter().enumerate() {
            let listed = position == 0 && items.enumerated;
            match out.last_mut() {
                // After a semicolon comes the next of a list's items; "Thanks!"
                // is left to be dropped.
                Some(before)
                    if !listed
                        && !before.ends_with(';')
                        && has_substance(&sentence)
                        && !opens_request(&sentence) =>
                {
                    before.push(' ');
                    before.push_str(sentence.trim());
                }
                _ => out.push(sentence),
            }
        }
    }
    out
}

/// Words a request may open with before its verb ("Could you please
/// list …", "I'd like to book …").
const POLITE_OPENINGS: &[&str] = &[
    "and", "but", "so", "ok", "okay", "now", "next", "lastly", "please", "kindly", "can", "could",
    "would", "will", "you", "help", "me", "i", "i'd", "we", "we'd", "like", "want", "need", "to",
    "let's", "let", "us",
];

/// Words that number a request ("First, …", "Secondly, …").
const ORDINALS: &[&str] = &[
    "first", "firstly", "second", "secondly", "third", "thirdly", "fourth", "fourthly", "fifth",
    "last", "lastly",
];

/// A sentence that asks for something: an ordinal, a request verb or a
/// question word first (the verb may follow polite openings), or a
/// connective ("also", "then") anywhere.
fn opens_request(sentence: &str) -> bool {
    static CONNECTIVE_WORD: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(&format!(r"(?i)\b(?:{})\b", connectives_pattern()))
            .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
    });
    if CONNECTIVE_WORD.is_match(sentence)
        || words(sentence)
            .next()
            .is_some_and(|w| ORDINALS.contains(&w.as_str()))
    {
        return true;
    }
    words(sentence)
        .find(|w| !POLITE_OPENINGS.contains(&w.as_str()))
        .is_some_and(|w| REQUEST_VERBS.contains(&w.as_str()))
}

/// A request's lines, and whether they were an enumeration or bullets
/// (items that each open a request) rather than plain line breaks.
struct ListItems {
    lines: Vec<String>,
    enumerated: bool,
}

/// Enumerations ("1) … 2) …", "(a) … (b) …") and bullet lines become
/// lines; then the text is cut at line breaks.
fn list_items(text: &str) -> ListItems {
    static MARKER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?m)(?:^|\s)(?:\(?(\d{1,2})[.)]|\(([a-h])\)|([a-h])\))\s+")
            .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
    });
    static BULLET: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?m)^\s*[-*•]\s+")
            .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
    });
    let markers: Vec<(usize, usize)> = MARKER
        .captures_iter(text)
        .filter_map(|c| c.get(0).map(|m| (m.start(), m.end())))
        .collect();
    // Two markers at least, or "version 2. Then" would be a list.
    let numbered = markers.len() >= 2;
    let text = if numbered {
        let mut out = String::with_capacity(text.len() + markers.len());
        let mut at = 0;
        for (start, end) in markers {
            out.push_str(&text[at..start]);
            out.push('\n');
            at = end;
        }
        out.push_str(&text[at..]);
        out
    } else {
        text.to_owned()
    };
    let enumerated = numbered || BULLET.is_match(&text);
    let text = BULLET.replace_all(&text, "\n");
    ListItems {
        lines: text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        enumerated,
    }
}

/// Words after which a full stop does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "st", "no", "approx", "inc", "ltd",
];

/// Abbreviations that often end a sentence too ("… for Apple Inc. Can
/// you …"): there a capitalised request after them opens the next one.
const ENDS_SENTENCES: &[&str] = &["inc", "ltd", "etc"];

/// `text` starts with a capitalised word a request opens with ("Can",
/// "Please", "Find", "Lastly").
fn request_follows(text: &str) -> bool {
    let Some(first) = text.split_whitespace().next() else {
        return false;
    };
    let word = first
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
        .to_lowercase();
    first.chars().next().is_some_and(char::is_uppercase)
        && (POLITE_OPENINGS.contains(&word.as_str())
            || REQUEST_VERBS.contains(&word.as_str())
            || ORDINALS.contains(&word.as_str()))
}

/// Cut at `.`, `!`, `?` and `;` followed by a space (URLs, versions and
/// decimals have none), except after an abbreviation.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, c) in text.char_indices() {
        if !matches!(c, '.' | '!' | '?' | ';') {
            continue;
        }
        let next = bytes.get(i + 1).copied();
        if next.is_some_and(|b| !b.is_ascii_whitespace()) {
            continue;
        }
        if c == '.' {
            let word = text[start..i]
                .rsplit(|c: char| c.is_whitespace() || c == '(')
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            if ABBREVIATIONS.contains(&word.as_str())
                && !(ENDS_SENTENCES.contains(&word.as_str()) && request_follows(&text[i + 1..]))
            {
                continue;
            }
        }
        out.push(text[start..=i].to_owned());
        start = i + 1;
    }
    out.push(text[start..].to_owned());
    out.retain(|s| !s.trim().is_empty());
    out
}

/// Phrases that start another request; the text is cut before them and
/// they are dropped. Longer phrases first, so "and also" wins over "also".
const CONNECTIVES: &[&str] = &[
    "and after that",
    "and afterwards",
    "and additionally",
    "and finally",
    "and also",
    "and then",
    "as well as",
    "after that",
    "afterwards",
    "in addition",
    "additionally",
    "furthermore",
    "moreover",
    "finally",
    "besides that",
    "on top of that",
    "then",
    "also",
    "plus",
];

/// The connectives as alternatives of a regex, any run of spaces between
/// their words.
fn connectives_pattern() -> String {
    CONNECTIVES
        .iter()
        .map(|c| c.replace(' ', r"\s+"))
        .collect::<Vec<_>>()
        .join("|")
}

fn at_connectives(text: &str) -> Vec<String> {
    static CONNECTIVE: LazyLock<Regex> = LazyLock::new(|| {
        let alternatives = connectives_pattern();
        Regex::new(&format!(r"(?i)(?:^|[\s,;:]+)(?:{alternatives})\b[\s,:]*"))
            .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
    });
    split_at(text, &CONNECTIVE)
}

/// Verbs a request starts with; "and" or a comma before one of them starts
/// another request ("list the pods and show the logs").
const REQUEST_VERBS: &[&str] = &[
    "add",
    "analyze",
    "analyse",
    "append",
    "apply",
    "ask",
    "assign",
    "book",
    "calculate",
    "check",
    "click",
    "close",
    "commit",
    "compare",
    "complete",
    "compute",
    "convert",
    "copy",
    "count",
    "crawl",
    "create",
    "delete",
    "deploy",
    "describe",
    "download",
    "draft",
    "drop",
    "edit",
    "email",
    "estimate",
    "explain",
    "export",
    "extract",
    "fetch",
    "fill",
    "find",
    "fork",
    "generate",
    "get",
    "give",
    "import",
    "insert",
    "install",
    "invite",
    "link",
    "list",
    "locate",
    "log",
    "look",
    "make",
    "merge",
    "message",
    "move",
    "navigate",
    "notify",
    "open",
    "post",
    "prepare",
    "print",
    "provide",
    "publish",
    "push",
    "query",
    "read",
    "recommend",
    "remove",
    "rename",
    "reply",
    "report",
    "retrieve",
    "return",
    "review",
    "run",
    "save",
    "scale",
    "schedule",
    "scrape",
    "search",
    "send",
    "set",
    "share",
    "show",
    "stage",
    "start",
    "stop",
    "submit",
    "suggest",
    "summarise",
    "summarize",
    "switch",
    "take",
    "tell",
    "translate",
    "update",
    "upload",
    "write",
    "what",
    "what's",
    "which",
    "how",
    "who",
    "where",
    "when",
];

fn at_request_verbs(text: &str) -> Vec<String> {
    static BEFORE_VERB: LazyLock<Regex> = LazyLock::new(|| {
        let verbs = REQUEST_VERBS
            .iter()
            .map(|v| regex::escape(v))
            .collect::<Vec<_>>()
            .join("|");
        // The cut keeps the verb: it is matched by a look-ahead the regex
        // crate lacks, so the verb is captured and given back below.
        Regex::new(&format!(
            r"(?i)(?:,\s*and|\s+and|,)\s+(?:(?:please|can\s+you|could\s+you|would\s+you|help\s+me|i'd\s+like\s+to|i\s+want\s+to|i\s+need\s+to)\s+)?((?:{verbs})\b)"
        ))
        .unwrap_or_else(|err| unreachable!("a fixed pattern compiles: {err}"))
    });
    let mut out = Vec::new();
    let mut at = 0;
    for captures in BEFORE_VERB.captures_iter(text) {
        let (Some(whole), Some(verb)) = (captures.get(0), captures.get(1)) else {
            continue;
        };
        out.push(text[at..whole.start()].to_owned());
        at = verb.start();
    }
    out.push(text[at..].to_owned());
    out.retain(|s| !s.trim().is_empty());
    out
}

fn split_at(text: &str, pattern: &Regex) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    for found in pattern.find_iter(text) {
        out.push(text[at..found.start()].to_owned());
        at = found.end();
    }
    out.push(text[at..].to_owned());
    out.retain(|s| !s.trim().is_empty());
    out
}

/// Words that carry no request of their own.
const FILLERS: &[&str] = &[
    "a", "an", "the", "me", "my", "of", "to", "in", "on", "for", "with", "and", "or", "it", "its",
    "is", "are", "be", "please", "can", "could", "would", "you", "i", "we", "us", "our", "this",
    "that", "these", "those", "there", "them", "then", "also", "too", "as", "well", "do", "so",
    "now", "at", "by", "from", "all", "some", "any",
];

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '_' || c == '-'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// A piece is a request of its own with two words or more, one of them
/// not a filler ("read" alone, or "and it", is not).
fn is_request_sized(piece: &str) -> bool {
    let all: Vec<String> = words(piece).collect();
    all.len() >= 2 && all.iter().any(|w| !FILLERS.contains(&w.as_str()))
}

/// Pieces too small to stand alone go back to the piece before them (the
/// first one to the piece after it); small ones with nothing to search for
/// are dropped.
fn merge_small(pieces: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(pieces.len());
    let mut pending: Option<String> = None;
    for piece in pieces {
        let piece = match pending.take() {
            Some(before) => format!("{before} {piece}"),
            None => piece,
        };
        if is_request_sized(&piece) {
            out.push(piece);
        } else if !has_substance(&piece) {
            // "Thanks!", "and it": nothing to search for, nor to add to
            // a neighbour.
        } else if let Some(last) = out.last_mut() {
            last.push(' ');
            last.push_str(&piece);
        } else {
            pending = Some(piece);
        }
    }
    if let Some(rest) = pending {
        match out.last_mut() {
            Some(last) => {
                last.push(' ');
                last.push_str(&rest);
            }
            None => out.push(rest),
        }
    }
    out
}

/// The piece without the punctuation and connective words around it.
fn clean(piece: &str) -> String {
    let trimmed = piece.trim_matches(|c: char| {
        c.is_whitespace() || matches!(c, ',' | ';' | ':' | '.' | '!' | '-' | '(' | ')')
    });
    trimmed.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Words that ask without saying what for ("I need your help with this").
const ASKING_ONLY: &[&str] = &[
    "need",
    "needs",
    "want",
    "like",
    "help",
    "assist",
    "know",
    "thanks",
    "thank",
    "hello",
    "hi",
    "your",
    "yours",
    "something",
    "things",
    "thing",
    "stuff",
    "here",
    "what",
    "how",
    "which",
    "who",
    "where",
    "when",
    "this",
    "that",
    "task",
    "question",
    "request",
    "following",
    "d",
    "ll",
    "m",
    "s",
    "get",
    "give",
    "tell",
    "show",
    "find",
    "do",
    "make",
    "provide",
];

/// A piece that says what it wants: one word that is neither a filler nor
/// a word of asking ("I need your help", "Thanks!" are not requests).
fn has_substance(piece: &str) -> bool {
    words(piece)
        .flat_map(|w| w.split('\'').map(str::to_owned).collect::<Vec<_>>())
        .any(|w| {
            !w.is_empty() && !FILLERS.contains(&w.as_str()) && !ASKING_ONLY.contains(&w.as_str())
        })
}

/// "I run a small bakery and I'm expanding", "Imagine you are a teacher",
/// "A car is travelling on a straight road": a statement about the user or
/// the situation with no request in it. Its words stay in the whole
/// request, which each intent's ranking takes as context.
fn sets_the_scene(piece: &str) -> bool {
    const ABOUT_THE_USER: &[&str] = &[
        "i", "i'm", "im", "i've", "we", "we're", "my", "our", "you", "you're", "you've", "your",
        "he", "she", "they", "it", "it's", "there", "a", "an", "the", "this", "at", "suddenly",
        "imagine", "suppose", "assume",
    ];
    const ASKS: &[&str] = &[
        "need", "want", "like", "please", "help", "wish", "looking", "must", "should",
    ];
    let lower = piece.to_lowercase();
    let first = words(&lower).next().unwrap_or_default();
    ABOUT_THE_USER.contains(&first.as_str())
        && !lower.contains('?')
        && !words(&lower).any(|w| ASKS.contains(&w.as_str()))
}

#[cfg(test)]
mod tests {
    use super::intents;

    #[test]
    fn single_requests_stay_whole() {
        for query in [
            "read a text file",
            "read and write files",
            "create and merge a pull request",
            "search issues and pull requests in a repository",
            "take a screenshot of the page",
            "what time is it in Tokyo?",
            "convert 9am New York time to Berlin time",
            "fetch https://example.com/a.b.c and nothing else",
            "e.g. list the files in /tmp",
        ] {
            assert_eq!(intents(query), vec![query.to_owned()], "{query}");
        }
    }

    #[test]
    fn sentences_connectives_and_verbs_cut_a_request() {
        assert_eq!(
            intents("Find the anime with ID 5. Also search movies with the keyword comedy"),
            [
                "Find the anime with ID 5",
                "search movies with the keyword comedy"
            ]
        );
        assert_eq!(
            intents("Read the config file at /etc/app.yaml and also tell me the time in Tokyo"),
            [
                "Read the config file at /etc/app.yaml",
                "tell me the time in Tokyo"
            ]
        );
        assert_eq!(
            intents("list the pods in the default namespace and show the logs of the api pod"),
            [
                "list the pods in the default namespace",
                "show the logs of the api pod"
            ]
        );
        assert_eq!(
            intents("Navigate to https://x.org/a, fill in the search form, and take a snapshot"),
            [
                "Navigate to https://x.org/a",
                "fill in the search form",
                "take a snapshot"
            ]
        );
        assert_eq!(
            intents("Get the coordinates of 10 Downing Street; what's the elevation there?"),
            [
                "Get the coordinates of 10 Downing Street",
                "what's the elevation there?"
            ]
        );
    }

    #[test]
    fn sentences_that_open_no_request_stay_with_the_one_before() {
        for query in [
            "Retrieve the latest sensor readings of my organization. Use the network ID L_579. \
             Today is March 6, 2024. I want 100 entries per page.",
            "I need to set up a new Postgres server. The nickname is 'ProjectDB', the host \
             'foo.com' and the port 5432.",
            "Could you tell me the weather in Yosemite? For temperature, Celsius.",
        ] {
            assert_eq!(intents(query), vec![query.to_owned()], "{query}");
        }
        // A numbered, questioning or connected sentence still opens one.
        assert_eq!(
            intents(
                "Can you help me with this? First, I want to know the \
                 rewards of Call of Duty. Second, I am curious about the scores of FIFA."
            ),
            [
                "First, I want to know the rewards of Call of Duty",
                "Second, I am curious about the scores of FIFA"
            ]
        );
        assert_eq!(
            intents("Book a table for two in Lyon. The time is 8pm. What is the weather there?"),
            [
                "Book a table for two in Lyon. The time is 8pm",
                "What is the weather there?"
            ]
        );
    }

    #[test]
    fn enumerations_and_bullets_are_intents() {
        assert_eq!(
            intents("1) list the pods 2) show the logs 3) scale the deployment to 3"),
            [
                "list the pods",
                "show the logs",
                "scale the deployment to 3"
            ]
        );
        assert_eq!(
            intents("1. create a project called shop 2. run SQL to create a table"),
            ["create a project called shop", "run SQL to create a table"]
        );
        assert_eq!(
            intents("- post to the channel\n- add a reaction to the message"),
            ["post to the channel", "add a reaction to the message"]
        );
        // One number is not a list.
        assert_eq!(intents("upgrade to version 2. thanks").len(), 1);
    }

    #[test]
    fn a_company_name_can_end_a_sentence() {
        assert_eq!(
            intents(
                "I need the cash flow statement for Apple Inc. Can you get the \
                 historical prices chart for the past 6 months?"
            ),
            [
                "I need the cash flow statement for Apple Inc",
                "Can you get the historical prices chart for the past 6 months?"
            ]
        );
        // Not before a name or a lower-case word.
        for query in [
            "Compare Acme Inc. Widgets with the rest",
            "List the stocks of Acme Inc. listed in Berlin",
        ] {
            assert_eq!(intents(query), vec![query.to_owned()], "{query}");
        }
    }

    #[test]
    fn pleasantries_are_no_intent() {
        assert_eq!(
            intents("I need your help. Find bakeries near Brooklyn, and list my projects. Thanks!"),
            ["Find bakeries near Brooklyn", "list my projects"]
        );
        assert_eq!(
            intents("Can you help me with this? Read the file notes.txt"),
            vec!["Can you help me with this? Read the file notes.txt".to_owned()]
        );
    }

    #[test]
    fn scene_setting_is_no_intent_and_the_tail_is_kept() {
        assert_eq!(
            intents("I run a small bakery. Find bakeries near Brooklyn, and list my projects."),
            ["Find bakeries near Brooklyn", "list my projects"]
        );
        assert_eq!(
            intents(
                "Imagine you are a real estate investor. The rate is 2%. \
                 Can you calculate the depreciated value? Also, what is the monthly repayment?"
            ),
            [
                "Can you calculate the depreciated value?",
                "what is the monthly repayment?"
            ]
        );
        let many = intents(
            "buy apples. Then buy bread. Then buy cheese. Then buy dates. Then buy eggs. Then buy figs",
        );
        assert_eq!(many.len(), super::MAX_INTENTS);
        assert!(
            many.last()
                .is_some_and(|l| l.contains("dates") && l.contains("figs"))
        );
    }
}
