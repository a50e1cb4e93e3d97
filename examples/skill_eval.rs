//! Fits and checks the local skill classifier on the hand-labelled tools of
//! `eval/skills_labels.json` (real servers' tools in `eval/catalog`).
//!
//!     cargo run --release --example skill_eval [-- --misses] [--before]
//!
//! The catalog is `eval/catalog` and `eval/catalog-skills` (servers of
//! domains the first taxonomy lacked); `--before` classifies with the
//! taxonomy's first 31 skills only, as it was before it was widened.
//!
//! Fits the calibration on the tuning servers only, then reports, for the
//! fitted and the shipped calibration, on the tuning and the held-out
//! servers: whether the primary skill is one of the tool's labels, the
//! precision and recall of the assigned skills, tools left without a skill,
//! and how well confidence matches the share of right assignments.

use mcp_aggregator::eval::{build_index, load_catalog};
use mcp_aggregator::index::similarity::normalised_mean;
use mcp_aggregator::model::Skill;
use mcp_aggregator::skills::classify::{
    CALIBRATION, Calibration, Features, Prototypes, classify, features,
};
use mcp_aggregator::skills::taxonomy;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

/// Skills in `assets/skills.json` before issue 33 widened it.
const FIRST_TAXONOMY: usize = 31;

#[derive(Deserialize)]
struct Labels {
    held_out: Vec<String>,
    servers: BTreeMap<String, ServerLabels>,
}

#[derive(Deserialize)]
struct ServerLabels {
    default: Vec<String>,
    #[serde(default)]
    tools: BTreeMap<String, Vec<String>>,
}

struct Labelled {
    id: String,
    /// The server's similarities to each skill.
    server: Vec<f32>,
    held_out: bool,
    /// A server of `eval/catalog-skills` (domains the first taxonomy lacked).
    widening: bool,
    skills: Vec<String>,
    vectors: Vec<Vec<f32>>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
    let show_misses = std::env::args().any(|a| a == "--misses");
    let labels: Labels =
        serde_json::from_str(&std::fs::read_to_string(root.join("skills_labels.json"))?)?;
    let mut catalog = load_catalog(&root.join("catalog"))?;
    // Servers of domains the first taxonomy lacked, read by this evaluation
    // only (the search evaluation's catalog stays as its figures were
    // measured on).
    let widening = load_catalog(&root.join("catalog-skills"))?;
    let widening_servers: Vec<String> = widening.iter().map(|s| s.server.clone()).collect();
    catalog.extend(widening);
    let dir = tempfile::tempdir()?;
    let index = build_index(dir.path(), &catalog)?;
    let everything: Vec<Skill> = taxonomy::builtin();
    // `--before`: the taxonomy as it was before the widening (its first 31
    // skills), to measure what the new ones bring.
    let skills: Vec<Skill> = if std::env::args().any(|a| a == "--before") {
        everything.into_iter().take(FIRST_TAXONOMY).collect()
    } else {
        everything
    };
    let texts: Vec<String> = skills.iter().flat_map(Skill::prototype_texts).collect();
    let prototypes = Prototypes::new(&skills, index.embed_texts(&texts)?);
    let vectors = index.tool_vectors(|_| true)?;

    let mut tools = Vec::new();
    for server in &catalog {
        let Some(spec) = labels.servers.get(&server.server) else {
            continue;
        };
        let prefix = format!("{}.", server.server);
        let mean = normalised_mean(
            vectors
                .iter()
                .filter(|(id, _)| id.starts_with(&prefix))
                .filter_map(|(_, v)| normalised_mean(v.iter().map(Vec::as_slice)))
                .collect::<Vec<_>>()
                .iter()
                .map(Vec::as_slice),
        );
        let server_sims = mean
            .map(|m| prototypes.similarities(&[m]))
            .unwrap_or_default();
        for tool in &server.tools {
            let Some(name) = tool.get("name").and_then(|n| n.as_str()) else {
                continue;
            };
            let id = format!("{}.{name}", server.server);
            let Some(v) = vectors.get(id.as_str()) else {
                continue;
            };
            tools.push(Labelled {
                id,
                server: server_sims.clone(),
                held_out: labels.held_out.contains(&server.server),
                widening: widening_servers.contains(&server.server),
                skills: spec.tools.get(name).unwrap_or(&spec.default).clone(),
                vectors: v.clone(),
            });
        }
    }
    let tuning: Vec<&Labelled> = tools.iter().filter(|t| !t.held_out).collect();
    let held_out: Vec<&Labelled> = tools.iter().filter(|t| t.held_out).collect();
    let first_held_out: Vec<&Labelled> = held_out.iter().copied().filter(|t| !t.widening).collect();
    let widening_held_out: Vec<&Labelled> =
        held_out.iter().copied().filter(|t| t.widening).collect();
    println!(
        "{} skills; {} labelled tools: {} tuning, {} held out ({} servers)\n",
        prototypes.skill_ids.len(),
        tools.len(),
        tuning.len(),
        held_out.len(),
        labels.held_out.len()
    );

    let mut samples: Vec<(Features, bool)> = Vec::new();
    for tool in &tuning {
        let f = features(&prototypes.similarities(&tool.vectors), &tool.server);
        for (f, id) in f.into_iter().zip(&prototypes.skill_ids) {
            samples.push((f, tool.skills.contains(id)));
        }
    }
    let fitted = Calibration::fit(&samples);
    println!("fitted on the tuning servers: {fitted:?}\nshipped: {CALIBRATION:?}\n");

    println!(
        "| calibration | split | tools | primary right | precision | recall | no skill | skills/tool |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, calibration) in [("shipped", CALIBRATION), ("fitted", fitted)] {
        for (split, set) in [
            ("tuning", &tuning),
            ("held out", &held_out),
            ("held out: first servers", &first_held_out),
            ("held out: new domains", &widening_held_out),
        ] {
            let m = measure(&prototypes, set, &calibration);
            println!(
                "| {name} | {split} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} |",
                set.len(),
                m.primary,
                m.precision,
                m.recall,
                m.without,
                m.per_tool
            );
        }
    }

    // Does confidence mean what it says? Share of right assignments per
    // confidence band, held-out servers, shipped calibration.
    let mut bands: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for tool in &held_out {
        let f = features(&prototypes.similarities(&tool.vectors), &tool.server);
        for (f, id) in f.iter().zip(&prototypes.skill_ids) {
            let c = CALIBRATION.confidence(f);
            if c < 0.1 {
                continue;
            }
            let band = ((c * 10.0).floor() as u32).min(9);
            let entry = bands.entry(band).or_default();
            entry.0 += 1;
            entry.1 += usize::from(tool.skills.contains(id));
        }
    }
    println!("\n| confidence (held out, shipped) | assignments | right |\n| --- | --- | --- |");
    for (band, (n, right)) in bands {
        println!(
            "| {:.1}–{:.1} | {n} | {:.2} |",
            band as f32 / 10.0,
            (band + 1) as f32 / 10.0,
            right as f32 / n as f32
        );
    }

    let all_vectors: Vec<(&Vec<Vec<f32>>, &Vec<f32>)> =
        tools.iter().map(|t| (&t.vectors, &t.server)).collect();
    let started = Instant::now();
    let rounds = 20;
    let mut assigned = 0usize;
    for _ in 0..rounds {
        for (v, server) in &all_vectors {
            assigned += classify(&prototypes, v, server, &CALIBRATION).len();
        }
    }
    let per_tool = started.elapsed().as_secs_f64() / (rounds * all_vectors.len()) as f64;
    println!(
        "\nclassifying (vectors ready): {:.1} µs per tool, {:.0} tools/s ({assigned} assignments)",
        per_tool * 1e6,
        1.0 / per_tool
    );

    if show_misses {
        println!("\nheld-out tools whose primary skill is wrong:");
        for tool in &held_out {
            let chosen = classify(&prototypes, &tool.vectors, &tool.server, &CALIBRATION);
            let primary = chosen.first().map(|s| s.skill_id.as_str());
            if primary.is_none_or(|p| !tool.skills.iter().any(|s| s == p)) {
                let got: Vec<String> = chosen
                    .iter()
                    .map(|s| format!("{} {:.2}", s.skill_id, s.confidence))
                    .collect();
                println!("  {}: labelled {:?}, got {:?}", tool.id, tool.skills, got);
            }
        }
    }
    Ok(())
}

struct Measured {
    primary: f64,
    precision: f64,
    recall: f64,
    without: f64,
    per_tool: f64,
}

fn measure(prototypes: &Prototypes, set: &[&Labelled], calibration: &Calibration) -> Measured {
    let (mut primary, mut right, mut assigned, mut found, mut labelled, mut without) =
        (0, 0, 0, 0, 0, 0);
    let mut per_skill: HashMap<String, usize> = HashMap::new();
    for tool in set {
        let chosen = classify(prototypes, &tool.vectors, &tool.server, calibration);
        if chosen.is_empty() {
            without += 1;
        }
        if chosen
            .first()
            .is_some_and(|s| tool.skills.contains(&s.skill_id))
        {
            primary += 1;
        }
        assigned += chosen.len();
        right += chosen
            .iter()
            .filter(|s| tool.skills.contains(&s.skill_id))
            .count();
        labelled += tool.skills.len();
        found += tool
            .skills
            .iter()
            .filter(|l| chosen.iter().any(|s| &s.skill_id == *l))
            .count();
        for s in &chosen {
            *per_skill.entry(s.skill_id.clone()).or_default() += 1;
        }
    }
    let n = set.len().max(1) as f64;
    Measured {
        primary: primary as f64 / n,
        precision: right as f64 / assigned.max(1) as f64,
        recall: found as f64 / labelled.max(1) as f64,
        without: without as f64 / n,
        per_tool: assigned as f64 / n,
    }
}
