//! The local classifier: how close a tool's vectors are to each skill's
//! (its description and example phrases, embedded by the search model),
//! turned into a calibrated confidence by logistic regression (Platt
//! scaling) fitted on hand-labelled tools (`eval/skills_labels.json`;
//! `cargo run --release --example skill_eval` refits and reports accuracy
//! on servers never used to fit).

use crate::index::similarity::dot;
use crate::model::Skill;
use crate::model::skill::{SkillAssignment, choose_skills};

/// Bumped whenever the features or the calibration change: tools
/// classified by an older one are classified again.
pub const CLASSIFIER_VERSION: u32 = 1;

/// The logistic calibration: confidence = σ(bias + similarity·s + margin·m
/// plus standing·z + server·s' + server_margin·m'), where s is the tool's
/// similarity to the skill, m how far it trails the tool's best skill
/// (≤ 0), z how far above the tool's mean over all skills it stands (in
/// standard deviations), and s', m' the same two for the mean vector of
/// all the server's tools: a server's tools tend to share its trade
/// ("Sentry" tools are about errors even when one says "team").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    pub bias: f32,
    pub similarity: f32,
    pub margin: f32,
    pub standing: f32,
    pub server: f32,
    pub server_margin: f32,
}

/// Fitted by `examples/skill_eval.rs` on the tuning servers of
/// `eval/skills_labels.json` (see BENCHMARKS.md "Skills"); fitted again
/// for the 41-skill taxonomy (more skills spread the margins).
pub const CALIBRATION: Calibration = Calibration {
    bias: -4.51,
    similarity: 0.35,
    margin: 3.67,
    standing: 1.35,
    server: 4.37,
    server_margin: 6.41,
};

/// The embedded texts of every visible skill, in one matrix per kind.
#[derive(Debug, Clone, Default)]
pub struct Prototypes {
    pub skill_ids: Vec<String>,
    /// Per skill: its name-and-description vector.
    descriptions: Vec<Vec<f32>>,
    /// Per skill: its example phrases' vectors.
    examples: Vec<Vec<Vec<f32>>>,
}

/// One skill's features for one tool.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Features {
    pub similarity: f32,
    pub margin: f32,
    pub standing: f32,
    pub server: f32,
    pub server_margin: f32,
}

impl Prototypes {
    /// `vectors` holds, skill after skill, the vectors of each skill's
    /// `prototype_texts()` (description first).
    pub fn new(skills: &[Skill], vectors: Vec<Vec<f32>>) -> Prototypes {
        let mut vectors = vectors.into_iter();
        let mut prototypes = Prototypes::default();
        for skill in skills {
            let texts = skill.prototype_texts().len();
            let mut own: Vec<Vec<f32>> = (&mut vectors).take(texts).collect();
            if own.is_empty() {
                continue;
            }
            let description = own.remove(0);
            prototypes.skill_ids.push(skill.id.clone());
            prototypes.descriptions.push(description);
            prototypes.examples.push(own);
        }
        prototypes
    }

    /// A skill's name-and-description vector.
    pub fn description_of(&self, skill_id: &str) -> Option<&[f32]> {
        let i = self.skill_ids.iter().position(|s| s == skill_id)?;
        self.descriptions.get(i).map(Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.skill_ids.is_empty()
    }

    /// How close a tool (its vectors) is to each skill: the mean of its
    /// similarity to the description and to the skill's two nearest
    /// examples, each taken at the tool's nearest vector.
    pub fn similarities(&self, tool: &[Vec<f32>]) -> Vec<f32> {
        let nearest = |prototype: &[f32]| {
            tool.iter()
                .map(|v| dot(v, prototype))
                .fold(f32::NEG_INFINITY, f32::max)
        };
        self.descriptions
            .iter()
            .zip(&self.examples)
            .map(|(description, examples)| {
                let to_description = nearest(description);
                let mut to_examples: Vec<f32> = examples.iter().map(|e| nearest(e)).collect();
                to_examples.sort_unstable_by(|a, b| b.total_cmp(a));
                let top: Vec<f32> = to_examples.into_iter().take(2).collect();
                if top.is_empty() {
                    to_description
                } else {
                    0.5 * to_description + 0.5 * top.iter().sum::<f32>() / top.len() as f32
                }
            })
            .collect()
    }
}

/// Each skill's features from the tool's similarities to every skill and
/// its server's (the server's mean vector's; the tool's own when alone).
pub fn features(similarities: &[f32], server: &[f32]) -> Vec<Features> {
    let own = standing(similarities);
    let server_best = server.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    own.into_iter()
        .zip(server.iter().chain(std::iter::repeat(&0.0)))
        .map(|(f, &s)| Features {
            server: s,
            server_margin: if server.is_empty() {
                0.0
            } else {
                s - server_best
            },
            ..f
        })
        .collect()
}

fn standing(similarities: &[f32]) -> Vec<Features> {
    let n = similarities.len().max(1) as f32;
    let best = similarities
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let mean = similarities.iter().sum::<f32>() / n;
    let spread = (similarities
        .iter()
        .map(|s| (s - mean) * (s - mean))
        .sum::<f32>()
        / n)
        .sqrt()
        .max(1e-6);
    similarities
        .iter()
        .map(|&s| Features {
            similarity: s,
            margin: s - best,
            standing: (s - mean) / spread,
            ..Features::default()
        })
        .collect()
}

impl Calibration {
    pub fn confidence(&self, f: &Features) -> f32 {
        let z = self.bias
            + self.similarity * f.similarity
            + self.margin * f.margin
            + self.standing * f.standing
            + self.server * f.server
            + self.server_margin * f.server_margin;
        1.0 / (1.0 + (-z).exp())
    }

    /// Fits the calibration by gradient descent on the log-loss of
    /// (features, is this skill right) samples.
    pub fn fit(samples: &[(Features, bool)]) -> Calibration {
        let mut w = [0.0f64; 6];
        if samples.is_empty() {
            return Calibration {
                bias: 0.0,
                similarity: 0.0,
                margin: 0.0,
                standing: 0.0,
                server: 0.0,
                server_margin: 0.0,
            };
        }
        let n = samples.len() as f64;
        let x = |f: &Features| {
            [
                1.0,
                f64::from(f.similarity),
                f64::from(f.margin),
                f64::from(f.standing),
                f64::from(f.server),
                f64::from(f.server_margin),
            ]
        };
        // Full-batch gradient descent with a decaying step; 4 weights and a
        // few thousand samples converge in well under a second.
        for step in 0..20_000 {
            let mut grad = [0.0f64; 6];
            for (f, label) in samples {
                let xs = x(f);
                let z: f64 = w.iter().zip(&xs).map(|(w, x)| w * x).sum();
                let p = 1.0 / (1.0 + (-z).exp());
                let err = p - if *label { 1.0 } else { 0.0 };
                for (g, x) in grad.iter_mut().zip(&xs) {
                    *g += err * x / n;
                }
            }
            let rate = 2.0 / (1.0 + f64::from(step) / 5_000.0);
            for (w, g) in w.iter_mut().zip(&grad) {
                *w -= rate * g;
            }
        }
        Calibration {
            bias: w[0] as f32,
            similarity: w[1] as f32,
            margin: w[2] as f32,
            standing: w[3] as f32,
            server: w[4] as f32,
            server_margin: w[5] as f32,
        }
    }
}

/// The skills a tool is given: every skill's calibrated confidence, kept
/// at ≥ 0.5, at most three, highest first. `server` is the similarities of
/// the tool's server (`Prototypes::similarities` of its tools' mean).
pub fn classify(
    prototypes: &Prototypes,
    tool: &[Vec<f32>],
    server: &[f32],
    calibration: &Calibration,
) -> Vec<SkillAssignment> {
    if tool.is_empty() || prototypes.is_empty() {
        return Vec::new();
    }
    let scored = features(&prototypes.similarities(tool), server)
        .iter()
        .zip(&prototypes.skill_ids)
        .map(|(f, id)| SkillAssignment {
            skill_id: id.clone(),
            confidence: calibration.confidence(f),
        })
        .collect();
    choose_skills(scored)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }

    fn skill(id: &str, examples: usize) -> Skill {
        Skill {
            id: id.into(),
            name: id.into(),
            description: "d".into(),
            examples: vec!["e".into(); examples],
            builtin: false,
            hidden: false,
        }
    }

    #[test]
    fn a_tool_close_to_one_skill_gets_it_first() {
        let skills = [skill("aa", 1), skill("bb", 1), skill("cc", 0)];
        let vectors = vec![
            unit(&[1.0, 0.0, 0.0]),
            unit(&[1.0, 0.1, 0.0]),
            unit(&[0.0, 1.0, 0.0]),
            unit(&[0.1, 1.0, 0.0]),
            unit(&[0.0, 0.0, 1.0]),
        ];
        let prototypes = Prototypes::new(&skills, vectors);
        assert_eq!(prototypes.skill_ids, ["aa", "bb", "cc"]);
        let tool = [unit(&[0.9, 0.2, 0.0]), unit(&[0.7, 0.3, 0.1])];
        let sims = prototypes.similarities(&tool);
        assert!(sims[0] > sims[1] && sims[0] > 0.9, "{sims:?}");
        let f = features(&sims, &sims);
        assert_eq!(f[0].margin, 0.0);
        assert!(f[1].margin < 0.0 && f[0].standing > 0.0);
        let chosen = classify(&prototypes, &tool, &sims, &CALIBRATION);
        assert_eq!(chosen[0].skill_id, "aa");
        assert!(chosen.iter().all(|s| s.confidence >= 0.5));
        assert!(classify(&prototypes, &[], &[], &CALIBRATION).is_empty());
    }

    #[test]
    fn fitting_separates_right_from_wrong() {
        // Right skills sit at high similarity and lead; wrong ones trail.
        let mut samples = Vec::new();
        for i in 0..200 {
            let jitter = (i % 10) as f32 / 100.0;
            samples.push((
                Features {
                    similarity: 0.6 + jitter,
                    margin: 0.0,
                    standing: 2.5,
                    ..Features::default()
                },
                true,
            ));
            samples.push((
                Features {
                    similarity: 0.3 + jitter,
                    margin: -0.25,
                    standing: 0.0,
                    ..Features::default()
                },
                false,
            ));
        }
        let fitted = Calibration::fit(&samples);
        let right = fitted.confidence(&samples[0].0);
        let wrong = fitted.confidence(&samples[1].0);
        assert!(right > 0.9 && wrong < 0.1, "{right} {wrong}");
    }
}
