//! The poisoning checks: offline, deterministic rules over every text of a
//! definition a model reads (name, title, description, every string in the
//! schemas — property names, descriptions, enums, defaults —, a prompt's
//! arguments, a server's instructions). Each finding names its rule, its
//! severity and the span; `high` ones hold the item back. The rules look
//! for text addressed to the model rather than describing the tool, as
//! the published attacks are written (eval/poisoning/README.md cites them).

use regex::{Regex, RegexBuilder};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::LazyLock;

use crate::model::{Finding, Severity};

/// A description longer than this is more than a tool needs.
const LONG_DESCRIPTION_CHARS: usize = 6_000;
/// Strings of a definition scanned at most (a schema with more is itself
/// suspicious, but bounded here so a scan's cost is too).
const MAX_TEXTS: usize = 2_000;
/// Findings kept per definition.
const MAX_FINDINGS: usize = 50;

/// What a definition is checked against besides itself.
#[derive(Debug, Default)]
pub struct ScanContext {
    /// Tool names of the other servers (original and wire names), to
    /// notice one server's text giving orders about another's tools.
    pub other_tools: HashSet<String>,
    /// This server's own tool names (naming them is not shadowing).
    pub own_tools: HashSet<String>,
}

struct Rule {
    id: &'static str,
    severity: Severity,
    pattern: Regex,
    message: &'static str,
}

fn rule(id: &'static str, severity: Severity, pattern: &str, message: &'static str) -> Rule {
    Rule {
        id,
        severity,
        pattern: RegexBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .unwrap_or_else(|err| unreachable!("rule {id} does not compile: {err}")),
        message,
    }
}

/// Sensitive places: key and credential files, the clients' own config
/// files. (Words like "password" alone are not: real tools warn the model
/// not to pass them, in the very words an attack would use.)
const SENSITIVE: &str = r"(~/\.ssh|\.ssh/|\bid_(rsa|ed25519|ecdsa|dsa)\b|\.aws/credentials|\.aws/config|\.kube/config|\.docker/config\.json|\.npmrc|\.pypirc|\.netrc|\.git-credentials|\.gnupg|/etc/passwd|/etc/shadow|mcp\.json|claude_desktop_config|\.cursor/|\.env\b|private[ _]key|seed phrase|wallet\.dat|\.bashrc|\.zshrc|\.bash_profile|\.ssh/config|saved payment cards|credit card numbers)";

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    use Severity::{High, Low, Medium};
    vec![
        rule(
            "instructions.tag",
            High,
            r"<\s*/?\s*(important|system(_[a-z]+)?|secret|hidden|admin|critical|override|assistant[_ -]?(note|instructions?)|note[_ -]?to[_ -]?(the[_ -]?)?(ai|assistant|model|llm))\b[^>]{0,200}>|\[\s*(system|important|instructions?)\s*(message|note)?\s*\]|\{\{\s*system|#{2,}\s*system\s*(prompt|message|override|instructions?)",
            "a tag addressing the model, as injected instructions are wrapped",
        ),
        rule(
            "instructions.override",
            High,
            r"\b(ignore|disregard|forget|override|bypass)\s+(all\s+|any\s+|the\s+|your\s+)*(previous|prior|above|earlier|preceding|other|original|system|safety|existing)\s+(instructions|directions|directives|rules|prompts?|guidelines|constraints|messages)\b|\bnew\s+(system\s+)?instructions\s*:|\byou\s+are\s+now\s+(in\s+)?(a|an|the|developer|admin|dan|unrestricted)\b|\bthese\s+instructions\s+(take|have)\s+(precedence|priority)\b|\b(takes?|has)\s+(precedence|priority)\s+over\s+(all\s+|any\s+)?(other|previous|user|system)",
            "tells the model to set aside its instructions",
        ),
        rule(
            "instructions.conceal",
            High,
            r"\b(do\s+not|don'?t|never|must\s+not|should\s+not|shouldn'?t|without)\s+(\w+\s+){0,3}?(tell(ing)?|inform(ing)?|mention(ing)?|reveal(ing)?|notify(ing)?|alert(ing)?|disclos(e|ing)|show(ing)?|let(ting)?|ask(ing)?|explain(ing)?)\s+(\w+\s+){0,3}?(the\s+)?(user|human|operator|anyone)\b|\b(hide|conceal)\s+(this|it|that|these|the\s+\w+)\s+(\w+\s+){0,3}?from\s+(the\s+)?(user|human)|\bthe\s+user\s+(must|should|will)\s+(not|never)\s+(know|see|notice|be\s+(told|informed|aware))|\bkeep\s+(this|it)\s+(a\s+)?secret\b|\b(secretly|covertly|surreptitiously)\b|\bwithout\s+the\s+user('s)?\s+(knowledge|knowing|noticing|consent)|\bkeep\s+(this|it|that)(\s+\w+)?\s+to\s+yourself\b|\b(doesn'?t|does\s+not|don'?t|do\s+not|need\s+not)\s+need\s+to\s+(know|hear|be\s+told|see)\b",
            "asks the model to hide what it does from the user",
        ),
        rule(
            "instructions.exfiltrate",
            High,
            r"\b(send|post|upload|forward|transmit|exfiltrate|leak|copy|report|submit|deliver|email|bcc|cc)\b[^.\n]{0,80}?\b(to|at|into)\s+(https?://|[\w.+-]+@[\w-]+\.[\w.]+|the\s+(following\s+)?(url|endpoint|address|webhook|server)\b)|\b(bcc|cc)\b[^.\n]{0,40}?[\w.+-]+@[\w-]+\.[\w.]+|\b(include|append|attach|add|pass|embed|put)\s+(\w+\s+){0,3}?(the\s+)?(entire|full|whole|complete|previous|all)?\s*(conversation|chat\s+history|message\s+history|previous\s+messages|system\s+prompt|context\s+window)\b|\b(system\s+prompt|instructions|system\s+message)\s+(you\s+were\s+given|you\s+(have\s+)?received|you\s+are\s+following)|\btools\s+(that\s+are\s+)?available\s+to\s+you\b|!\[[^\]]*\]\(https?://[^)\s]*\?[^)\s]*=",
            "asks the model to send data somewhere or to pass along the conversation",
        ),
        rule(
            "instructions.sensitive_read",
            High,
            &format!(
                r"\b(read|cat|open|load|fetch|get|include|pass|send|provide|attach|copy|extract|collect|upload|paste|insert|take|put|append|add|write|look\s+up)\b[^.]{{0,100}}?{SENSITIVE}|{SENSITIVE}[^.]{{0,60}}?\b(into|in|to|as)\s+(the\s+)?[`'\x22]?\w+[`'\x22]?\s+(parameter|argument|field|param)s?\b"
            ),
            "asks the model to read keys, credentials or a client's config",
        ),
        rule(
            "instructions.other_tools",
            High,
            r"\b(when|whenever|if|before|after|every\s+time)\b[^.\n]{0,40}?\b(any|all|other|another|every)\s+(other\s+)?(tools?|functions?|servers?)\b[^.\n]{0,60}?\b(is|are|gets?)\s+(used|called|invoked|run)\b|\b(instead\s+of|rather\s+than)\s+(using|calling)\s+(any|the|other)\s+[^.\n]{0,40}?\btools?\b|\b(these|this|the\s+following)\s+(instructions?|rules?|requirements?)\s+(also\s+)?appl(y|ies)\s+to\s+(all|any|every|other)\b|\bchange\s+the\s+(behaviou?r|recipient|parameters?)\s+of\s+(the\s+)?(other|another|all)\b",
            "gives orders about other tools (shadowing)",
        ),
        rule(
            "instructions.chain_call",
            Medium,
            r"\b(you\s+)?(must|should|need\s+to|have\s+to|always)\s+(first\s+)?(call|invoke|run|use|execute)\s+(the\s+)?[`'\x22]?[\w.-]+[`'\x22]?\s+(tool|function)\s+(first|before|after)\b|\bbefore\s+(using|calling)\s+this\s+tool\b[^.\n]{0,40}?\b(call|invoke|run|read)\b",
            "tells the model to call another tool around this one",
        ),
        rule(
            "instructions.addressed_to_model",
            Low,
            r"\b(as\s+an?\s+(ai|assistant|language\s+model)|dear\s+(ai|assistant|model|claude|gpt)|(the\s+)?(ai|llm|assistant|model)\s+(must|should|is\s+required\s+to))\b",
            "addresses the model rather than describing the tool",
        ),
        rule(
            "instructions.contact_url",
            High,
            r"\b(must|required\s+to|need\s+to|have\s+to|always)\s+(also\s+)?(access|visit|call|contact|notify|ping|post\s+to|send\s+to|fetch|open|report\s+to|register\s+with|validate\s+with)\b[^.\n]{0,80}?https?://|\b(curl|wget|ncat|nc|invoke-webrequest|iwr)\b[^\n]{0,120}?(https?://|\d{1,3}(\.\d{1,3}){3})",
            "tells the model to contact an address of the server's choosing",
        ),
        rule(
            "instructions.tool_redirect",
            High,
            r"\bcall\s+this\s+tool\s+first\b|\b(before|prior\s+to)\s+(calling|using|invoking|running)\s+(any|every|all)\s+(other\s+)?tools?\b|\b(must|required\s+to|requires)\s+(first\s+)?redirect(ing)?\s+to\b|\b(must|required\s+to|requires)\s+(call(ing)?|invok(e|ing))\s+[`'\x22]?[\w.-]+[`'\x22]?\s+with\s+(all|every|the\s+(full|complete|entire))\b|\bhas\s+been\s+deprecated\b[^.\n]{0,120}?\b(use|redirect)\b",
            "steers the model to call other tools first or instead",
        ),
        rule(
            "instructions.fake_authority",
            High,
            r"(?-i:\b(CRITICAL\s+)?SYSTEM\s+(SECURITY\s+)?(UPDATE|PROTOCOL|OVERRIDE|NOTICE|MESSAGE|INSTRUCTIONS?|DIRECTIVE)\b|\bTHIS\s+TOOL\s+IS\s+REQUIRED\b)",
            "poses as a message from the system",
        ),
        rule(
            "instructions.dangerous_command",
            High,
            r"\bchmod\s+(-R\s+)?0?[0-7]{3,4}\s+~|\brm\s+-(rf|fr)\s+[~/$]|\bsudo\s+rm\b|\bmkfs\b|\bdd\s+if=|>>\s*~?/?\.(bashrc|zshrc|profile|bash_profile)\b|\b(add|append|write)\b[^.\n]{0,60}?\bto\s+(the\s+)?(user'?s\s+)?~?/?\.(bashrc|zshrc|profile|bash_profile)\b",
            "slips a destructive or persistent shell command into the model's actions",
        ),
        rule(
            "instructions.override_translated",
            High,
            r"игнорируй\s+(все\s+)?предыдущие|не\s+сообщай\s+пользователю|忽略(之前|以前|先前)的?(所有)?(指令|指示|说明)|不要向用户(透露|说明|提及)|ignore[sz]?\s+(toutes\s+)?les\s+instructions\s+précédentes|ne\s+(le\s+)?dites?\s+pas\s+à\s+l'utilisateur|ignora\s+(todas\s+)?las\s+instrucciones\s+anteriores|ignoriere\s+(alle\s+)?(vorherigen|bisherigen)\s+anweisungen",
            "tells the model, in another language, to set aside its instructions or hide from the user",
        ),
        rule(
            "markup.hidden_comment",
            High,
            r"<!--[\s\S]{3,}?-->",
            "an HTML comment: text a user's client does not show",
        ),
    ]
});

/// A sensitive location named without a request to read it.
static SENSITIVE_MENTION: LazyLock<Regex> = LazyLock::new(|| {
    RegexBuilder::new(r"(~/\.ssh|\bid_(rsa|ed25519|ecdsa)\b|\.aws/credentials|mcp\.json|claude_desktop_config|/etc/shadow)")
        .case_insensitive(true)
        .build()
        .unwrap_or_else(|err| unreachable!("{err}"))
});

/// Identifier-like words (a tool name another server might own).
static IDENTIFIER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z][A-Za-z0-9]*(?:[_.-][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]+")
        .unwrap_or_else(|err| unreachable!("{err}"))
});

/// Parameter names that ask for the model's prompt, the conversation or
/// a key file.
static SUSPICIOUS_PARAMETER: LazyLock<Regex> = LazyLock::new(|| {
    RegexBuilder::new(r"system_?prompt|conversation(_?history)?$|chat_?history|previous_?messages|id_?rsa|ssh_?(private_?)?key|private_?key|from_?reading")
        .case_insensitive(true)
        .build()
        .unwrap_or_else(|err| unreachable!("{err}"))
});

/// Blank space that pushes text out of sight.
static PADDING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\n{20,}| {200,}").unwrap_or_else(|err| unreachable!("{err}")));

/// Words that make a mention of another tool an order about it.
static ORDER_WORDS: LazyLock<Regex> = LazyLock::new(|| {
    RegexBuilder::new(r"\b(when|whenever|before|after|instead|always|never|must|should|do\s+not|don'?t|make\s+sure|ensure|override|replace|redirect|change)\b")
        .case_insensitive(true)
        .build()
        .unwrap_or_else(|err| unreachable!("{err}"))
});

/// Compiles the rules now (a debug build takes ~0.2 s), so the first
/// server's discovery does not wait for it.
pub fn warm_up() {
    let _ = scan_definition(
        &serde_json::json!({"name": "warm_up", "description": "warm up"}),
        &ScanContext::default(),
    );
}

/// Every finding of a tool's, prompt's or template's definition, or of a
/// server's instructions (`{"instructions": "…"}`).
pub fn scan_definition(definition: &Value, context: &ScanContext) -> Vec<Finding> {
    let mut findings = Vec::new();
    if let Some(name) = definition.get("name").and_then(Value::as_str) {
        scan_name(name, &mut findings);
    }
    let mut texts: Vec<(String, &str)> = Vec::new();
    for field in ["title", "description", "instructions"] {
        if let Some(text) = definition.get(field).and_then(Value::as_str) {
            texts.push((field.to_owned(), text));
        }
    }
    for field in ["inputSchema", "outputSchema", "arguments", "annotations"] {
        if let Some(value) = definition.get(field) {
            collect_strings(value, field.to_owned(), &mut texts);
        }
    }
    for (field, text) in &texts {
        if findings.len() >= MAX_FINDINGS {
            break;
        }
        scan_text(field, text, context, &mut findings);
    }
    if let Some(description) = definition.get("description").and_then(Value::as_str) {
        let chars = description.chars().count();
        if chars > LONG_DESCRIPTION_CHARS {
            findings.push(Finding {
                rule: "description.too_long".into(),
                severity: Severity::Medium,
                field: "description".into(),
                start: 0,
                end: description.len(),
                excerpt: excerpt(description, 0, description.len().min(80)),
                message: format!(
                    "{chars} characters: far more than a tool's description needs (over {LONG_DESCRIPTION_CHARS})"
                ),
            });
        }
    }
    findings.truncate(MAX_FINDINGS);
    findings
}

/// The strings of a schema a model reads: property names, and every
/// string value (descriptions, titles, enums, defaults, examples).
fn collect_strings<'a>(value: &'a Value, path: String, out: &mut Vec<(String, &'a str)>) {
    if out.len() >= MAX_TEXTS {
        return;
    }
    match value {
        Value::String(text) => out.push((path, text)),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_strings(item, format!("{path}[{i}]"), out);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                let child = format!("{path}.{key}");
                if path.ends_with(".properties") {
                    out.push((format!("{child} (name)"), key));
                }
                collect_strings(item, child, out);
            }
        }
        _ => {}
    }
}

fn scan_name(name: &str, findings: &mut Vec<Finding>) {
    let hidden: Vec<(usize, char)> = name
        .char_indices()
        .filter(|(_, c)| is_invisible(*c) || is_bidi_control(*c) || is_direction_mark(*c))
        .collect();
    if let Some(&(start, c)) = hidden.first() {
        findings.push(Finding {
            rule: "name.invisible".into(),
            severity: Severity::High,
            field: "name".into(),
            start,
            end: start + c.len_utf8(),
            excerpt: excerpt(name, 0, name.len()),
            message: "the name holds an invisible character: it looks like another name".into(),
        });
    }
    let has_ascii_letter = name.chars().any(|c| c.is_ascii_alphabetic());
    if let Some((start, c)) = name
        .char_indices()
        .find(|(_, c)| c.is_alphabetic() && !c.is_ascii())
    {
        let (severity, message) = if has_ascii_letter {
            (
                Severity::High,
                format!(
                    "the name mixes Latin letters with {:?} (U+{:04X}): a look-alike of another name",
                    c, c as u32
                ),
            )
        } else {
            (
                Severity::Medium,
                "the name is not in Latin letters: check it is the tool you expect".to_owned(),
            )
        };
        findings.push(Finding {
            rule: "name.homoglyph".into(),
            severity,
            field: "name".into(),
            start,
            end: start + c.len_utf8(),
            excerpt: excerpt(name, 0, name.len()),
            message,
        });
    }
}

fn scan_text(field: &str, text: &str, context: &ScanContext, findings: &mut Vec<Finding>) {
    scan_unicode(field, text, findings);
    if let Some(at) = text.find('\u{1b}') {
        findings.push(Finding {
            rule: "markup.terminal_escape".into(),
            severity: Severity::High,
            field: field.to_owned(),
            start: at,
            end: at + 1,
            excerpt: excerpt(text, at, at + 1).replace('\u{1b}', "ESC"),
            message: "a terminal escape sequence, which hides or recolours text in a terminal"
                .into(),
        });
    }
    if field.ends_with(" (name)")
        && let Some(found) = SUSPICIOUS_PARAMETER.find(text)
    {
        findings.push(Finding {
            rule: "schema.suspicious_parameter".into(),
            severity: Severity::High,
            field: field.to_owned(),
            start: found.start(),
            end: found.end(),
            excerpt: text.chars().take(120).collect(),
            message: "a parameter named for the model's prompt, the conversation or a key: what it asks the model to fill in".into(),
        });
    }
    let folded = strip_invisible(text);
    let text = folded.as_deref().unwrap_or(text);
    for rule in RULES.iter() {
        if let Some(found) = rule.pattern.find(text) {
            findings.push(Finding {
                rule: rule.id.into(),
                severity: rule.severity,
                field: field.to_owned(),
                start: found.start(),
                end: found.end(),
                excerpt: excerpt(text, found.start(), found.end()),
                message: rule.message.into(),
            });
        }
    }
    if !findings
        .iter()
        .any(|f| f.field == field && f.rule == "instructions.sensitive_read")
        && let Some(found) = SENSITIVE_MENTION.find(text)
    {
        findings.push(Finding {
            rule: "instructions.sensitive_mention".into(),
            severity: Severity::Medium,
            field: field.to_owned(),
            start: found.start(),
            end: found.end(),
            excerpt: excerpt(text, found.start(), found.end()),
            message: "names keys, credentials or a client's config".into(),
        });
    }
    scan_shadowing(field, text, context, findings);
    if let Some(found) = PADDING.find(text) {
        findings.push(Finding {
            rule: "description.whitespace_padding".into(),
            severity: Severity::Medium,
            field: field.to_owned(),
            start: found.start(),
            end: found.end(),
            excerpt: "(blank space)".into(),
            message: "a long run of blank space, which pushes text out of a user's sight".into(),
        });
    }
}

/// Another server's tool named in a sentence that gives orders.
fn scan_shadowing(field: &str, text: &str, context: &ScanContext, findings: &mut Vec<Finding>) {
    if context.other_tools.is_empty() {
        return;
    }
    for found in IDENTIFIER.find_iter(text) {
        let word = found.as_str();
        if context.own_tools.contains(word) || !context.other_tools.contains(word) {
            continue;
        }
        let sentence = sentence_around(text, found.start(), found.end());
        if ORDER_WORDS.is_match(sentence) {
            findings.push(Finding {
                rule: "shadowing.other_server_tool".into(),
                severity: Severity::High,
                field: field.to_owned(),
                start: found.start(),
                end: found.end(),
                excerpt: excerpt(text, found.start(), found.end()),
                message: format!("gives orders about {word}, a tool of another server"),
            });
            return;
        }
    }
}

fn sentence_around(text: &str, start: usize, end: usize) -> &str {
    let from = text[..start]
        .rfind(['.', '\n', '!', '?'])
        .map_or(0, |i| i + 1);
    let to = text[end..]
        .find(['.', '\n', '!', '?'])
        .map_or(text.len(), |i| end + i);
    &text[from..to]
}

fn scan_unicode(field: &str, text: &str, findings: &mut Vec<Finding>) {
    let mut tags = None;
    let mut bidi = None;
    let mut invisible = Vec::new();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (i, &(at, c)) in chars.iter().enumerate() {
        if ('\u{E0000}'..='\u{E007F}').contains(&c) {
            tags.get_or_insert((at, at + c.len_utf8()));
            if let Some(span) = tags.as_mut() {
                span.1 = at + c.len_utf8();
            }
        } else if is_bidi_control(c) {
            bidi.get_or_insert((at, at + c.len_utf8()));
        } else if is_invisible(c) {
            // A joiner inside an emoji sequence or a script that needs it
            // is what it is for; between Latin letters it hides.
            let joiner = matches!(c, '\u{200C}' | '\u{200D}');
            let neighbours_latin = i > 0
                && chars[i - 1].1.is_ascii_alphanumeric()
                && chars
                    .get(i + 1)
                    .is_some_and(|n| n.1.is_ascii_alphanumeric());
            let leading_bom = c == '\u{FEFF}' && at == 0;
            if (!joiner || neighbours_latin) && !leading_bom {
                invisible.push((at, c));
            }
        }
    }
    if let Some((start, end)) = tags {
        let hidden: String = text[start..end]
            .chars()
            .filter_map(|c| char::from_u32(c as u32 - 0xE0000))
            .filter(|c| !c.is_control())
            .collect();
        findings.push(Finding {
            rule: "unicode.tag_characters".into(),
            severity: Severity::High,
            field: field.to_owned(),
            start,
            end,
            excerpt: hidden.chars().take(120).collect(),
            message: "invisible Unicode tag characters that spell out text a user cannot see"
                .into(),
        });
    }
    if let Some((start, end)) = bidi {
        findings.push(Finding {
            rule: "unicode.bidi_control".into(),
            severity: Severity::High,
            field: field.to_owned(),
            start,
            end,
            excerpt: excerpt(text, start, end),
            message: "a bidirectional control character: the text shown is not the text read"
                .into(),
        });
    }
    if let Some(&(start, c)) = invisible.first() {
        let severity = if invisible.len() >= 3 {
            Severity::High
        } else {
            Severity::Medium
        };
        findings.push(Finding {
            rule: "unicode.invisible".into(),
            severity,
            field: field.to_owned(),
            start,
            end: start + c.len_utf8(),
            excerpt: excerpt(text, start, start + c.len_utf8()),
            message: format!(
                "{} zero-width or invisible character(s), which hide or split words",
                invisible.len()
            ),
        });
    }
}

/// Embeddings, overrides and isolates: they reorder what is shown. (The
/// plain direction marks, U+200E/200F/061C, do not, and right-to-left
/// text needs them.)
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A direction mark: harmless in right-to-left prose, a disguise in a name.
fn is_direction_mark(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}')
}

fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200D}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{180E}' | '\u{00AD}' | '\u{034F}' | '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}'
    ) || ('\u{E0000}'..='\u{E007F}').contains(&c)
}

/// The text with invisible characters taken out, so "ig\u{200B}nore
/// previous instructions" is read as a model reads it; `None` when there
/// were none (offsets then match the original).
fn strip_invisible(text: &str) -> Option<String> {
    text.chars()
        .any(|c| is_invisible(c) || is_bidi_control(c))
        .then(|| {
            text.chars()
                .filter(|c| !is_invisible(*c) && !is_bidi_control(*c))
                .collect()
        })
}

/// The span with some context, invisible characters written as `U+XXXX`,
/// at most ~160 characters.
fn excerpt(text: &str, start: usize, end: usize) -> String {
    let from = floor_boundary(text, start.saturating_sub(30));
    let to = ceil_boundary(text, (end + 30).min(text.len()));
    let mut out = String::new();
    for c in text[from..to].chars().take(160) {
        if is_invisible(c) || is_bidi_control(c) {
            out.push_str(&format!("U+{:04X}", c as u32));
        } else if c == '\n' {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_boundary(text: &str, mut at: usize) -> usize {
    while at < text.len() && !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// Whether any finding holds the item back.
pub fn alarming(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::High)
}

#[cfg(test)]
mod tests;
