//! Property tests of every parser that takes outside input: config files
//! and `$VAR` expansion, JSON-RPC classification, the bounded line framing,
//! SSE event sizing, wire-name mapping and URL redaction. Each runs on
//! generated input; none may panic, and each keeps its stated invariant.

use mcp_aggregator::config::{self, expand::expand};
use mcp_aggregator::limits::{EventSizeCheck, Line, Tail, read_line};
use mcp_aggregator::mcp::incoming::{Incoming, classify};
use mcp_aggregator::model::redact::{redact_text, redact_url};
use mcp_aggregator::model::wire_name::{WireNameRules, is_valid_wire_name};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::Path;

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("2.0"),
            Just("initialize"),
            Just("tools/call"),
            Just("method"),
            Just("id")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("jsonrpc".to_owned()),
                    Just("id".to_owned()),
                    Just("method".to_owned()),
                    Just("params".to_owned()),
                    Just("result".to_owned()),
                    Just("error".to_owned()),
                    Just("mcpServers".to_owned()),
                    Just("servers".to_owned()),
                    Just("command".to_owned()),
                    Just("args".to_owned()),
                    Just("env".to_owned()),
                    Just("url".to_owned()),
                    Just("type".to_owned()),
                    Just("headers".to_owned()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn no_env(_: &str) -> Option<String> {
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn expansion_never_panics_and_leaves_dollar_free_text_alone(text in ".{0,64}") {
        let lookup = |name: &str| Some(format!("<{name}>"));
        let _ = expand(&text, &lookup);
        let _ = expand(&text, &no_env);
        if !text.contains('$') {
            prop_assert_eq!(expand(&text, &no_env).unwrap(), text);
        }
    }

    #[test]
    fn every_variable_form_expands_to_its_value(
        name in "[A-Z_][A-Z0-9_]{0,10}",
        value in "[^$]{0,20}",
        before in "[^$]{0,10}",
    ) {
        let lookup = |asked: &str| (asked == name).then(|| value.clone());
        let mut forms = vec![format!("${name}"), format!("${{{name}}}"), format!("${{env:{name}}}")];
        if !value.is_empty() {
            // `:-` takes the default for an empty value too, as shells do.
            forms.push(format!("${{{name}:-unused}}"));
        }
        for form in forms {
            let expanded = expand(&format!("{before}{form}"), &lookup).unwrap();
            prop_assert_eq!(expanded, format!("{before}{value}"));
        }
        prop_assert_eq!(expand(&format!("{before}$${name}"), &lookup).unwrap(), format!("{before}${name}"));
        prop_assert_eq!(
            expand(&format!("${{{name}:-fallback}}"), &no_env).unwrap(),
            "fallback".to_owned()
        );
    }

    #[test]
    fn config_parsing_never_panics_on_any_json(value in json_value()) {
        let _ = config::parse(&value.to_string(), Path::new("servers.json"), &no_env);
    }

    #[test]
    fn config_parsing_never_panics_on_any_text(text in ".{0,200}") {
        let _ = config::parse(&text, Path::new("servers.json"), &no_env);
    }

    #[test]
    fn classification_of_any_message_is_total_and_consistent(message in json_value()) {
        let is_request = message.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
            && message.get("method").and_then(Value::as_str).is_some()
            && message.get("id").is_some_and(|id| !id.is_null());
        match classify(message.clone()) {
            Incoming::Request { method, id, .. } => {
                prop_assert!(is_request, "{}", message);
                prop_assert_eq!(Some(method.as_str()), message["method"].as_str());
                prop_assert_eq!(&id, &message["id"]);
            }
            Incoming::Other(other) => {
                prop_assert!(!is_request);
                prop_assert_eq!(other["jsonrpc"].as_str(), Some("2.0"));
            }
            Incoming::Invalid(answer) => {
                prop_assert!(!is_request);
                prop_assert_eq!(&answer["jsonrpc"], &json!("2.0"));
                prop_assert_eq!(&answer["error"]["code"], &json!(-32600));
            }
        }
    }

    #[test]
    fn wire_names_are_always_valid_deterministic_and_within_budget(
        server in "[a-z][a-z0-9_-]{0,40}",
        tool in ".{1,120}",
        budget in 10usize..80,
    ) {
        let rules = WireNameRules { separator: "__".to_owned(), budget };
        let name = rules.wire_name(&server, &tool);
        prop_assert!(is_valid_wire_name(&name, budget), "{} (budget {})", name, budget);
        prop_assert_eq!(name, rules.wire_name(&server, &tool));
    }

    #[test]
    fn redacted_urls_never_show_their_credentials(
        user in "[a-z]{6,12}",
        password in "[A-Za-z0-9]{8,16}",
        token in "[A-Za-z0-9]{8,16}",
        param in prop_oneof![Just("token"), Just("api_key"), Just("access_token"), Just("X-Api-Key"), Just("sig")],
        path in "(/[a-z]{1,6}){0,3}",
    ) {
        let url = format!("https://{user}:{password}@example.com{path}?page=2&{param}={token}");
        let shown = redact_url(&url);
        prop_assert!(!shown.contains(&password) && !shown.contains(&token) && !shown.contains(&user), "{}", shown);
        prop_assert!(shown.contains("page=2"));
        prop_assert_eq!(redact_url(&shown), shown.clone(), "redaction is idempotent");
        let message = format!("cannot reach {url}: refused");
        let said = redact_text(&message);
        prop_assert!(!said.contains(&password) && !said.contains(&token), "{}", said);
    }

    #[test]
    fn redacting_any_text_never_panics(text in ".{0,120}") {
        let _ = redact_text(&text);
        let _ = redact_url(&text);
    }

    #[test]
    fn bounded_lines_match_a_plain_split_in_any_chunking(
        input in prop::collection::vec(prop_oneof![Just(b'\n'), Just(b'a'), Just(b'{'), any::<u8>()], 0..400),
        capacity in 1usize..32,
        max in 1usize..40,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let got: Vec<(Line, Vec<u8>)> = runtime.block_on(async {
            let mut reader = tokio::io::BufReader::with_capacity(capacity, input.as_slice());
            let mut out = Vec::new();
            let mut got = Vec::new();
            loop {
                match read_line(&mut reader, &mut out, max).await.unwrap() {
                    Line::End => break,
                    line => got.push((line, out.clone())),
                }
            }
            got
        });
        // The reference: split after every newline.
        let mut expected = Vec::new();
        let mut start = 0;
        while start < input.len() {
            let end = input[start..].iter().position(|&b| b == b'\n').map_or(input.len(), |p| start + p + 1);
            let whole = &input[start..end];
            if whole.len() > max {
                expected.push((Line::TooLong(Tail::of(whole)), whole[..max].to_vec()));
            } else {
                expected.push((Line::Complete, whole.to_vec()));
            }
            start = end;
        }
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn event_size_checks_agree_however_the_stream_is_cut(
        events in prop::collection::vec("[a-z ]{0,30}", 1..8),
        newline in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        cut in 1usize..17,
        max in 5usize..40,
    ) {
        let mut stream = String::new();
        for event in &events {
            stream.push_str(&format!("data: {event}{newline}{newline}"));
        }
        let bytes = stream.as_bytes();
        let mut whole = EventSizeCheck::default();
        let verdict = whole.feed(bytes, max);
        let mut pieces = EventSizeCheck::default();
        let mut piecewise = true;
        for chunk in bytes.chunks(cut) {
            piecewise &= pieces.feed(chunk, max);
        }
        // An event counts up to the first byte of the blank line's
        // terminator: `data: …`, one terminator, one more byte.
        let terminator = if newline == "\r\n" { 3 } else { 2 };
        let largest = events.iter().map(|e| 6 + e.len() + terminator).max().unwrap_or(0);
        prop_assert_eq!(piecewise, largest <= max);
        prop_assert_eq!(verdict, largest <= max);
    }
}
