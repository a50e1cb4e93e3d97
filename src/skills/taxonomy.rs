//! The taxonomy: the built-in skills shipped in `assets/skills.json`
//! (compiled in), with what users stored over them — their own skills, and
//! built-in ones they edited or hid (a built-in skill is never lost: hidden,
//! it can be shown again).

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

use crate::model::Skill;

const BUILTIN_JSON: &str = include_str!("../../assets/skills.json");

#[derive(Deserialize)]
struct BuiltinFile {
    skills: Vec<Skill>,
}

/// The built-in skills, in the file's order.
pub fn builtin() -> Vec<Skill> {
    // The file is part of the source tree and checked by a unit test; a
    // broken one is a build defect, shown as an empty taxonomy and an error.
    match serde_json::from_str::<BuiltinFile>(BUILTIN_JSON) {
        Ok(file) => file
            .skills
            .into_iter()
            .map(|skill| Skill {
                builtin: true,
                hidden: false,
                ..skill
            })
            .collect(),
        Err(err) => {
            tracing::error!("assets/skills.json is unreadable: {err}");
            Vec::new()
        }
    }
}

/// Every skill, built-in first (with stored edits), then users' own by id.
pub fn merge(builtin: Vec<Skill>, stored: Vec<Skill>) -> Vec<Skill> {
    let mut stored: BTreeMap<String, Skill> =
        stored.into_iter().map(|s| (s.id.clone(), s)).collect();
    let mut all: Vec<Skill> = builtin
        .into_iter()
        .map(|shipped| match stored.remove(&shipped.id) {
            Some(edited) => Skill {
                builtin: true,
                ..edited
            },
            None => shipped,
        })
        .collect();
    all.extend(stored.into_values().map(|s| Skill {
        builtin: false,
        ..s
    }));
    all
}

/// A short fingerprint of what classification depends on: the visible
/// skills' ids and texts. When it changes, tools are classified again.
pub fn fingerprint(skills: &[Skill]) -> String {
    let mut hasher = Sha256::new();
    for skill in skills.iter().filter(|s| !s.hidden) {
        for text in std::iter::once(&skill.id).chain(skill.prototype_texts().iter()) {
            hasher.update(text.as_bytes());
            hasher.update([0u8]);
        }
        hasher.update([1u8]);
    }
    hasher
        .finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_taxonomy_is_valid_and_broad() {
        let skills = builtin();
        assert!((25..=50).contains(&skills.len()), "{}", skills.len());
        let mut ids = std::collections::HashSet::new();
        for skill in &skills {
            let mut checked = skill.clone();
            checked.validate().unwrap();
            assert_eq!(&checked, skill, "{} is not trimmed", skill.id);
            assert!(skill.examples.len() >= 3, "{} has few examples", skill.id);
            assert!(ids.insert(skill.id.clone()), "{} twice", skill.id);
        }
    }

    #[test]
    fn stored_edits_override_builtins_and_user_skills_follow() {
        let shipped = builtin();
        let first = shipped[0].clone();
        let edited = Skill {
            hidden: true,
            builtin: false,
            ..first.clone()
        };
        let own = Skill {
            id: "zz_custom".into(),
            name: "Custom".into(),
            description: "mine".into(),
            examples: vec![],
            builtin: true,
            hidden: false,
        };
        let all = merge(shipped.clone(), vec![own.clone(), edited]);
        assert_eq!(all.len(), shipped.len() + 1);
        assert!(all[0].hidden && all[0].builtin);
        let last = all.last().unwrap();
        assert_eq!(last.id, "zz_custom");
        assert!(!last.builtin, "a stored skill cannot claim to be built in");
        assert_ne!(fingerprint(&all), fingerprint(&shipped));
        // Hiding the first changes the fingerprint; unhiding restores it.
        let mut unhidden = merge(shipped.clone(), vec![]);
        assert_eq!(fingerprint(&unhidden), fingerprint(&shipped));
        unhidden[0].hidden = true;
        assert_ne!(fingerprint(&unhidden), fingerprint(&shipped));
    }
}
