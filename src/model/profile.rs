//! Profiles (views): what one client sees of the aggregate — which
//! servers, which tools (ids or wire names, with `*` and `?` globs, less
//! the excluded ones) and which skills. A list left out does not restrict;
//! a list given admits only what one of its patterns matches, and a tool
//! must pass every list given. No profile: everything.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::wire_name::WIRE_SEPARATOR;

/// A named view, as the config file, the API and the store hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Profile {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Server names (globs); absent: every server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<String>>,
    /// Tool ids (`server.tool`) or wire names (`server__tool`), globs;
    /// absent: every tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Tools left out even when the other lists admit them (globs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_tools: Vec<String>,
    /// Skill ids (globs): tools classified into one of them; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// The config file that defined it (absolute); `None`: the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// A profile's name goes into URLs (`/mcp/{name}`): the server-name rule.
pub const MAX_PROFILE_NAME: usize = 64;
/// Patterns per list, and characters per pattern.
pub const MAX_PATTERNS: usize = 500;
pub const MAX_PATTERN_LEN: usize = 256;

/// What is wrong with a profile: the field and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field} {message}")]
pub struct ProfileError {
    pub field: String,
    pub message: String,
}

impl Profile {
    /// Checks the name and every pattern; the profile as stored.
    pub fn validate(&self) -> Result<(), ProfileError> {
        validate_profile_name(&self.name)?;
        if let Some(description) = &self.description
            && description.chars().count() > 1000
        {
            return Err(ProfileError {
                field: "description".into(),
                message: "must be at most 1000 characters".into(),
            });
        }
        let lists = [
            ("servers", self.servers.as_deref()),
            ("tools", self.tools.as_deref()),
            ("exclude_tools", Some(self.exclude_tools.as_slice())),
            ("skills", self.skills.as_deref()),
        ];
        for (field, list) in lists {
            let Some(list) = list else { continue };
            if list.len() > MAX_PATTERNS {
                return Err(ProfileError {
                    field: field.into(),
                    message: format!("may hold at most {MAX_PATTERNS} patterns"),
                });
            }
            for (at, pattern) in list.iter().enumerate() {
                if pattern.is_empty() || pattern.len() > MAX_PATTERN_LEN {
                    return Err(ProfileError {
                        field: format!("{field}[{at}]"),
                        message: format!("must be 1 to {MAX_PATTERN_LEN} characters"),
                    });
                }
            }
            // A list too large to match by is refused here, never taken
            // as one that matches nothing (an exclusion that excludes
            // nothing).
            Globs::new(list).map_err(|message| ProfileError {
                field: field.into(),
                message,
            })?;
        }
        Ok(())
    }

    /// The same view (what it admits), whoever defined it and when.
    pub fn same_view(&self, other: &Profile) -> bool {
        self.description == other.description
            && self.servers == other.servers
            && self.tools == other.tools
            && self.exclude_tools == other.exclude_tools
            && self.skills == other.skills
    }
}

/// `^[a-z][a-z0-9_-]*$`, at most 64 characters.
pub fn validate_profile_name(name: &str) -> Result<(), ProfileError> {
    let fail = |message: &str| {
        Err(ProfileError {
            field: "name".into(),
            message: message.into(),
        })
    };
    if name.is_empty() || name.len() > MAX_PROFILE_NAME {
        return fail("must be 1 to 64 characters");
    }
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !first_ok
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
    {
        return fail("must match ^[a-z][a-z0-9_-]*$");
    }
    Ok(())
}

/// A list of globs, matched as a whole (`*`: any characters, `?`: one,
/// line breaks included), case-sensitively. Written as regex sets over the
/// crate's `regex` (a glob has no path rules here, so a glob crate would
/// add nothing).
///
/// A tool pattern that spells the boundary between server and tool (the
/// id's `.`, or the wire name's `__`) is held to it: `fix__*` and `fix.*`
/// name server `fix`'s tools, never those of a server named `fix__x` or
/// `fix_` (server names may hold `_`). Its wildcards stay on their side of
/// the boundary, and one of its `.` (or `__`) must fall on it. A pattern
/// that spells no boundary (`fix*`, `*echo*`) matches the whole name.
#[derive(Debug, Clone)]
pub struct Globs {
    /// Patterns that spell the boundary, matched against names whose
    /// boundary is marked (`BOUNDARY`); on other text, plain globs.
    bounded: regex::RegexSet,
    /// The other patterns, matched against names as they are.
    loose: regex::RegexSet,
    /// The bounded patterns without a wildcard.
    literals: Vec<String>,
}

/// What one list of globs may compile to.
const GLOBS_SIZE_LIMIT: usize = 64 << 20;

/// Stands for the boundary between server and tool in a marked name: a
/// character no server name holds (a tool whose own name holds it can
/// only confuse patterns that already name its server).
const BOUNDARY: char = '\u{1}';

/// How a pattern meets the server/tool boundary.
#[derive(Clone, Copy, PartialEq)]
enum PatternKind {
    /// Holds a `.`: a tool id; one of its dots is the boundary.
    Id,
    /// Holds `__` and no `.`: a wire name; one `__` is the boundary.
    Wire,
    Loose,
}

fn pattern_kind(pattern: &str) -> PatternKind {
    if pattern.contains('.') {
        PatternKind::Id
    } else if pattern.contains(WIRE_SEPARATOR) {
        PatternKind::Wire
    } else {
        PatternKind::Loose
    }
}

/// One glob as a regex. In a bounded pattern a wildcard never crosses the
/// marked boundary, and each place the boundary may fall also matches it:
/// a `.` of an id pattern, or any `__` inside a run of underscores of a
/// wire pattern (`fix___echo` is server `fix_`'s `echo` or `fix`'s `_echo`).
fn glob_regex(pattern: &str, kind: PatternKind) -> String {
    let bounded = kind != PatternKind::Loose;
    let (any_run, any_one) = match bounded {
        true => ("[^\\x01]*", "[^\\x01]"),
        false => (".*", "."),
    };
    let mut regex = String::with_capacity(pattern.len() + 8);
    regex.push_str("^(?:");
    let mut literal = [0u8; 4];
    let chars: Vec<char> = pattern.chars().collect();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        match c {
            // `**` is `*`: a run is one wildcard (a pattern of stars would
            // otherwise build a large automaton for nothing).
            '*' if at > 0 && chars[at - 1] == '*' => {}
            '*' => regex.push_str(any_run),
            '?' => regex.push_str(any_one),
            '.' if kind == PatternKind::Id => regex.push_str("(?:\\.|\\x01)"),
            '_' if kind == PatternKind::Wire => {
                let run = chars[at..].iter().take_while(|&&c| c == '_').count();
                if run >= WIRE_SEPARATOR.len() {
                    let rest = run - WIRE_SEPARATOR.len();
                    regex.push_str("(?:");
                    regex.push_str(&"_".repeat(run));
                    for before in 0..=rest {
                        regex.push('|');
                        regex.push_str(&"_".repeat(before));
                        regex.push_str("\\x01");
                        regex.push_str(&"_".repeat(rest - before));
                    }
                    regex.push(')');
                } else {
                    regex.push_str(&"_".repeat(run));
                }
                at += run;
                continue;
            }
            other => regex.push_str(&regex::escape(other.encode_utf8(&mut literal))),
        }
        at += 1;
    }
    regex.push_str(")$");
    regex
}

impl Globs {
    /// The list compiled, or why it cannot be (too large to match by).
    pub fn new(patterns: &[String]) -> Result<Globs, String> {
        let compile = |wanted: &dyn Fn(PatternKind) -> bool| {
            let regexes = patterns.iter().filter_map(|pattern| {
                let kind = pattern_kind(pattern);
                wanted(kind).then(|| glob_regex(pattern, kind))
            });
            // Every pattern is escaped text and a few operators: only its
            // size can stop it compiling.
            regex::RegexSetBuilder::new(regexes)
                .size_limit(GLOBS_SIZE_LIMIT)
                .dot_matches_new_line(true)
                .build()
                .map_err(|_| {
                    "is too large to match by: use fewer or shorter patterns, or fewer `?`"
                        .to_owned()
                })
        };
        Ok(Globs {
            bounded: compile(&|kind| kind != PatternKind::Loose)?,
            loose: compile(&|kind| kind == PatternKind::Loose)?,
            literals: patterns
                .iter()
                .filter(|p| pattern_kind(p) != PatternKind::Loose && !p.contains(['*', '?']))
                .cloned()
                .collect(),
        })
    }

    /// Matches nothing.
    fn empty() -> Globs {
        Globs {
            bounded: regex::RegexSet::empty(),
            loose: regex::RegexSet::empty(),
            literals: Vec::new(),
        }
    }

    /// Whether a name (a server's, a skill's) matches: every pattern as a
    /// plain glob.
    pub fn matches(&self, text: &str) -> bool {
        self.loose.is_match(text) || self.bounded.is_match(text)
    }

    /// Whether a tool, by its id (`server.tool`) or wire name, matches:
    /// patterns that spell the boundary are held to it.
    pub fn matches_tool(&self, server: &str, tool_id: &str, wire_name: Option<&str>) -> bool {
        if self.loose.is_match(tool_id) || wire_name.is_some_and(|wire| self.loose.is_match(wire)) {
            return true;
        }
        // A tool's own name may hold the marker (a hostile server's):
        // there it stands for any other character, so it neither ends the
        // wildcards nor makes a second boundary.
        let marked = |name: &str, separator: &str| {
            name.strip_prefix(server)
                .and_then(|rest| rest.strip_prefix(separator))
                .map(|tool| format!("{server}{BOUNDARY}{}", tool.replace(BOUNDARY, "\u{FFFD}")))
        };
        if marked(tool_id, ".").is_some_and(|id| self.bounded.is_match(&id)) {
            return true;
        }
        match wire_name {
            None => false,
            Some(wire) => match marked(wire, WIRE_SEPARATOR) {
                Some(marked) => self.bounded.is_match(&marked),
                // Shortened inside the server's name, the wire name shows
                // no boundary: only a pattern that is that very name
                // names it (a wildcard could reach another server's).
                None => self.literals.iter().any(|literal| literal == wire),
            },
        }
    }
}

/// A profile ready to match: each list compiled once.
#[derive(Debug, Clone)]
pub struct ProfileMatcher {
    servers: Option<Globs>,
    tools: Option<Globs>,
    exclude_tools: Option<Globs>,
    skills: Option<Globs>,
}

impl ProfileMatcher {
    /// A profile's rules; one whose lists do not compile (never stored:
    /// `validate` compiles them) admits nothing.
    pub fn new(profile: &Profile) -> ProfileMatcher {
        let compile = |list: &Option<Vec<String>>| list.as_deref().map(Globs::new).transpose();
        let exclude_tools = match profile.exclude_tools.is_empty() {
            true => Ok(None),
            false => Globs::new(&profile.exclude_tools).map(Some),
        };
        match (
            compile(&profile.servers),
            compile(&profile.tools),
            exclude_tools,
            compile(&profile.skills),
        ) {
            (Ok(servers), Ok(tools), Ok(exclude_tools), Ok(skills)) => ProfileMatcher {
                servers,
                tools,
                exclude_tools,
                skills,
            },
            _ => ProfileMatcher::nothing(),
        }
    }

    /// Whether the profile names servers, or tools or skills (whose
    /// servers are then the view's).
    pub fn names_servers(&self) -> bool {
        self.servers.is_some()
    }

    pub fn names_tools_or_skills(&self) -> bool {
        self.tools.is_some() || self.skills.is_some()
    }

    /// Admits nothing (a profile that was removed while clients used it).
    pub fn nothing() -> ProfileMatcher {
        let none = Some(Globs::empty());
        ProfileMatcher {
            servers: none,
            tools: None,
            exclude_tools: None,
            skills: None,
        }
    }

    pub fn admits_server(&self, server: &str) -> bool {
        self.servers.as_ref().is_none_or(|g| g.matches(server))
    }

    /// Whether the view filters by skill (the tool's skills are then
    /// needed).
    pub fn filters_skills(&self) -> bool {
        self.skills.is_some()
    }

    /// Whether one of the view's skills is this one (false when the view
    /// names no skills: see `filters_skills`).
    pub fn admits_skill(&self, skill: &str) -> bool {
        self.skills
            .as_ref()
            .is_some_and(|globs| globs.matches(skill))
    }

    /// A tool by its server, id and wire name: every rule but the skills.
    pub fn admits_named(&self, server: &str, tool_id: &str, wire_name: Option<&str>) -> bool {
        let named = |globs: &Globs| globs.matches_tool(server, tool_id, wire_name);
        self.admits_server(server)
            && self.tools.as_ref().is_none_or(named)
            && !self.exclude_tools.as_ref().is_some_and(named)
    }

    /// A tool, by its server, id, wire name and skills.
    pub fn admits_tool<'a>(
        &self,
        server: &str,
        tool_id: &str,
        wire_name: Option<&str>,
        skills: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        self.admits_named(server, tool_id, wire_name)
            && (!self.filters_skills() || skills.into_iter().any(|s| self.admits_skill(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(json: serde_json::Value) -> Profile {
        let mut value = json;
        value["updated_at"] = "2026-11-28T00:00:00Z".into();
        serde_json::from_value(value).expect("a profile")
    }

    #[test]
    fn globs_match_whole_names_and_escape_everything_else() {
        let globs = Globs::new(&[
            "github.*".into(),
            "fs.read_?ile".into(),
            "a+b".into(),
            "x**y".into(),
            "gh.delete_*".into(),
        ])
        .unwrap();
        assert!(
            globs.matches("gh.delete_repo\n"),
            "a line break is a character too"
        );
        assert!(globs.matches("xy") && globs.matches("x..y"));
        assert!(globs.matches("github.create_issue"));
        assert!(!globs.matches("xgithub.create_issue"));
        assert!(!globs.matches("githubXcreate"), "the dot is literal");
        assert!(globs.matches("fs.read_file"));
        assert!(!globs.matches("fs.read_file2"));
        assert!(globs.matches("a+b"));
        assert!(!globs.matches("aab"));
        assert!(!Globs::new(&[]).unwrap().matches("anything"));
    }

    #[test]
    fn a_pattern_that_spells_the_boundary_keeps_to_its_server() {
        let globs = Globs::new(&["fix__*".into(), "*__echo".into(), "gh.*".into()]).unwrap();
        // Server `fix`'s tools, by wire name or id.
        assert!(globs.matches_tool("fix", "fix.run", Some("fix__run")));
        assert!(globs.matches_tool("fix", "fix.x__y", Some("fix__x__y")));
        // Not those of servers whose names start with `fix_`.
        assert!(!globs.matches_tool("fix__x", "fix__x.run", Some("fix__x__run")));
        assert!(!globs.matches_tool("fix_", "fix_.run", Some("fix___run")));
        // `*__echo`: any server's `echo`, not `fix`'s `x__echo`.
        let echo = Globs::new(&["*__echo".into()]).unwrap();
        assert!(echo.matches_tool("fix__x", "fix__x.echo", Some("fix__x__echo")));
        assert!(!echo.matches_tool("fix", "fix.x__echo", Some("fix__x__echo")));
        assert!(globs.matches_tool("gh", "gh.a.b", Some("gh__a_b")));
        assert!(!globs.matches_tool("gh_x", "gh_x.a", Some("gh_x__a")));
        // A run of underscores: the boundary may fall on any `__` in it.
        let run = Globs::new(&["fix___echo".into()]).unwrap();
        assert!(run.matches_tool("fix_", "fix_.echo", Some("fix___echo")));
        assert!(run.matches_tool("fix", "fix._echo", Some("fix___echo")));
        assert!(!run.matches_tool("fi", "fi.x___echo", Some("fi__x___echo")));
        // An id pattern with `__` in its server: the dot is the boundary.
        let id = Globs::new(&["fix__x.echo".into()]).unwrap();
        assert!(id.matches_tool("fix__x", "fix__x.echo", Some("fix__x__echo")));
        assert!(!id.matches_tool("fix", "fix.x.echo", Some("fix__x_echo")));
        // A pattern that spells no boundary matches the whole name.
        let loose = Globs::new(&["fix*".into()]).unwrap();
        assert!(loose.matches_tool("fix__x", "fix__x.run", Some("fix__x__run")));
        // A shortened wire name keeps its server's prefix.
        assert!(globs.matches_tool("fix", "fix.long", Some("fix__xxxxxxxx_0123abcd")));
        // Shortened inside the server's name: named by itself only.
        let long_server = format!("team__{}", "x".repeat(40));
        let cut = "team__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_5aa75ad0";
        let exact = Globs::new(&[cut.to_owned()]).unwrap();
        assert!(exact.matches_tool(&long_server, &format!("{long_server}.danger"), Some(cut)));
        let team = Globs::new(&["team__*".into()]).unwrap();
        assert!(!team.matches_tool(&long_server, &format!("{long_server}.danger"), Some(cut)));
        // A tool name holding the marker is still its server's.
        let evil = Globs::new(&["evil.*".into(), "evil__*".into()]).unwrap();
        for name in ["p\u{1}.", "p\u{1}\u{1}", "\u{1}"] {
            assert!(
                evil.matches_tool("evil", &format!("evil.{name}"), None),
                "{name:?}"
            );
        }
        let by_wire = Globs::new(&["evil__*".into()]).unwrap();
        assert!(by_wire.matches_tool("evil", "evil.p\u{1}.", None));
        assert!(!evil.matches_tool("evil_x", "evil_x.p\u{1}", None));
        // Plain names (servers, skills) match every pattern as a glob.
        assert!(globs.matches("fix__x") && globs.matches("gh.x"));
    }

    #[test]
    fn every_given_list_must_admit_a_tool() {
        let view = ProfileMatcher::new(&profile(serde_json::json!({
            "name": "coding",
            "servers": ["github", "fs*"],
            "tools": ["github.*", "fs__read_*"],
            "exclude_tools": ["github.delete_*"],
        })));
        assert!(view.admits_tool("github", "github.create_issue", None, []));
        assert!(!view.admits_tool("github", "github.delete_repo", None, []));
        assert!(view.admits_tool("fs", "fs.read_file", Some("fs__read_file"), []));
        assert!(!view.admits_tool("fs", "fs.write_file", Some("fs__write_file"), []));
        assert!(!view.admits_tool("slack", "slack.post", None, []));
        assert!(view.admits_server("fs2"));
        assert!(
            !view.admits_tool("fs__x", "fs__x.read_file", Some("fs__x__read_file"), []),
            "fs__read_* names server fs's tools only"
        );
        assert!(!view.admits_server("slack"));
    }

    #[test]
    fn skills_admit_classified_tools_only() {
        let view = ProfileMatcher::new(&profile(serde_json::json!({
            "name": "writing", "skills": ["docs-*"],
        })));
        assert!(view.filters_skills());
        assert!(view.admits_tool("a", "a.t", None, ["docs-editing"]));
        assert!(!view.admits_tool("a", "a.t", None, ["code"]));
        assert!(!view.admits_tool("a", "a.t", None, []));
        assert!(!ProfileMatcher::nothing().admits_tool("a", "a.t", None, []));
    }

    #[test]
    fn names_and_patterns_are_checked() {
        assert!(
            profile(serde_json::json!({"name": "ok-1"}))
                .validate()
                .is_ok()
        );
        for bad in ["", "Upper", "1abc", "has space", &"x".repeat(65)] {
            assert!(validate_profile_name(bad).is_err(), "{bad:?}");
        }
        let huge: Vec<String> = (0..MAX_PATTERNS)
            .map(|i| format!("{i}{}", "?".repeat(250)))
            .collect();
        let too_large = profile(serde_json::json!({"name": "p", "exclude_tools": huge}));
        let refused = too_large.validate().expect_err("too large to match by");
        assert_eq!(refused.field, "exclude_tools");
        assert!(!ProfileMatcher::new(&too_large).admits_tool("a", "a.t", None, []));
        let empty_pattern = profile(serde_json::json!({"name": "p", "tools": [""]}));
        assert_eq!(
            empty_pattern.validate().map_err(|e| e.field),
            Err("tools[0]".to_owned())
        );
    }
}
