//! Pinned tools: the ones listed beside the meta-tools even when `expose`
//! offers only those (`--pin`), so what a client needs on every turn is
//! at hand without a search. A selector names tools (`tool:GLOB`, or a
//! bare GLOB: a tool id or wire name), a server's tools (`server:GLOB`) or
//! a skill's tools (`skill:GLOB`); a tool any selector names is pinned.

use super::profile::Globs;

#[derive(Debug, Clone, Default)]
pub struct PinnedTools {
    servers: Option<Globs>,
    tools: Option<Globs>,
    skills: Option<Globs>,
}

impl PinnedTools {
    /// The selectors compiled, or why one cannot be used.
    pub fn parse(selectors: &[String]) -> Result<PinnedTools, String> {
        let (mut servers, mut tools, mut skills) = (Vec::new(), Vec::new(), Vec::new());
        for selector in selectors.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            let (list, pattern) = match selector.split_once(':') {
                Some(("server", rest)) => (&mut servers, rest),
                Some(("skill", rest)) => (&mut skills, rest),
                Some(("tool", rest)) => (&mut tools, rest),
                Some((kind, _)) if !kind.contains(['.', '*', '?']) => {
                    return Err(format!(
                        "pin {selector:?}: unknown kind {kind:?}; use server:NAME, skill:ID, tool:ID or a tool id"
                    ));
                }
                _ => (&mut tools, selector),
            };
            if pattern.is_empty() {
                return Err(format!("pin {selector:?} names nothing after the colon"));
            }
            list.push(pattern.to_owned());
        }
        let compile = |list: Vec<String>| -> Result<Option<Globs>, String> {
            match list.is_empty() {
                true => Ok(None),
                false => Globs::new(&list)
                    .map(Some)
                    .map_err(|err| format!("pins {err}")),
            }
        };
        Ok(PinnedTools {
            servers: compile(servers)?,
            tools: compile(tools)?,
            skills: compile(skills)?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_none() && self.tools.is_none() && self.skills.is_none()
    }

    /// Whether some selector names skills (the tools' skills are then
    /// needed).
    pub fn names_skills(&self) -> bool {
        self.skills.is_some()
    }

    /// A tool pinned by its server, id or wire name.
    pub fn pins_named(&self, server: &str, tool_id: &str, wire_name: Option<&str>) -> bool {
        self.servers.as_ref().is_some_and(|g| g.matches(server))
            || self
                .tools
                .as_ref()
                .is_some_and(|g| g.matches_tool(server, tool_id, wire_name))
    }

    /// Whether a tool of this skill is pinned.
    pub fn pins_skill(&self, skill: &str) -> bool {
        self.skills.as_ref().is_some_and(|g| g.matches(skill))
    }
}

#[cfg(test)]
mod tests {
    use super::PinnedTools;

    fn pins(selectors: &[&str]) -> PinnedTools {
        PinnedTools::parse(
            &selectors
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn each_kind_of_selector_pins_its_tools() {
        let p = pins(&[
            "server:time",
            "github.create_*",
            "tool:fx__echo",
            "skill:files",
        ]);
        assert!(p.pins_named("time", "time.get_current_time", None));
        assert!(p.pins_named(
            "github",
            "github.create_issue",
            Some("github__create_issue")
        ));
        assert!(!p.pins_named("github", "github.list_issues", Some("github__list_issues")));
        assert!(p.pins_named("fx", "fx.echo", Some("fx__echo")));
        assert!(!p.pins_named("fx__x", "fx__x.echo", Some("fx__x__echo")));
        assert!(p.pins_skill("files") && !p.pins_skill("files_extra"));
        assert!(p.names_skills() && !p.is_empty());
        assert!(pins(&[]).is_empty() && pins(&["", "  "]).is_empty());
        assert!(!pins(&[]).pins_named("time", "time.x", None));
    }

    #[test]
    fn bad_selectors_say_why() {
        let err = PinnedTools::parse(&["servr:time".to_owned()]).unwrap_err();
        assert!(err.contains("unknown kind \"servr\""), "{err}");
        let err = PinnedTools::parse(&["skill:".to_owned()]).unwrap_err();
        assert!(err.contains("names nothing"), "{err}");
        // A tool id with a colon-free glob is a tool.
        assert!(PinnedTools::parse(&["gh.*".to_owned()]).is_ok());
    }
}
