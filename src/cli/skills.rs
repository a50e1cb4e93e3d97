//! `mcp-aggregator skills …`: the taxonomy, a skill's tools,
//! reclassification and the suggestion queue, through the daemon's API.

use serde_json::{Value, json};
use std::process::ExitCode;

use super::admin_args::{ClientArgs, SkillsCommand};
use super::client::{connect, encode_segment};
use super::error::CliError;
use super::output::{field, fields, table};

const SKILLS_PATH: &str = "/api/v1/skills";

pub(super) async fn run(command: SkillsCommand) -> Result<ExitCode, CliError> {
    match command {
        SkillsCommand::List(args) => {
            let client = connect(&args.client);
            let path = format!("{SKILLS_PATH}?include_hidden={}", args.all);
            let skills: Vec<Value> = client.get(&path).await?;
            if args.client.json {
                println!("{}", Value::from(skills));
                return Ok(ExitCode::SUCCESS);
            }
            let rows = skills
                .iter()
                .map(|s| {
                    let mut flags = Vec::new();
                    if s["builtin"].as_bool() == Some(true) {
                        flags.push("built-in");
                    }
                    if s["hidden"].as_bool() == Some(true) {
                        flags.push("hidden");
                    }
                    vec![
                        field(s, "id"),
                        field(s, "name"),
                        field(s, "tool_count"),
                        flags.join(", "),
                    ]
                })
                .collect();
            println!("{}", table(&["ID", "NAME", "TOOLS", "FLAGS"], rows));
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Show(args) => {
            let client = connect(&args.client);
            let segment = encode_segment(&args.id);
            let skill: Value = client.get(&format!("{SKILLS_PATH}/{segment}")).await?;
            let tools: Vec<Value> = client
                .get(&format!("{SKILLS_PATH}/{segment}/tools"))
                .await?;
            if args.client.json {
                println!("{}", json!({"skill": skill, "tools": tools}));
                return Ok(ExitCode::SUCCESS);
            }
            let examples: Vec<String> = skill["examples"]
                .as_array()
                .map(|e| {
                    e.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let names: Vec<String> = tools.iter().map(|t| field(t, "id")).collect();
            println!(
                "{}",
                fields(&[
                    ("id", field(&skill, "id")),
                    ("name", field(&skill, "name")),
                    ("description", field(&skill, "description")),
                    ("examples", examples.join("; ")),
                    ("built-in", field(&skill, "builtin")),
                    ("hidden", field(&skill, "hidden")),
                    ("vector", field(&skill, "vector")),
                    ("tools", format!("{} {}", names.len(), names.join(", "))),
                ])
            );
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Add(args) => {
            let client = connect(&args.client);
            let body = json!({"id": args.id, "name": args.name, "description": args.description, "examples": args.examples});
            let skill: Value = client.post(SKILLS_PATH, &body).await?;
            print_done(&args.client, &skill, "added");
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Edit(args) => {
            let client = connect(&args.client);
            let path = format!("{SKILLS_PATH}/{}", encode_segment(&args.id));
            let body = json!({"name": args.name, "description": args.description, "examples": args.examples});
            let skill: Value = client.put(&path, &body).await?;
            print_done(&args.client, &skill, "updated");
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Remove(args) => {
            let client = connect(&args.client);
            client
                .delete(&format!("{SKILLS_PATH}/{}", encode_segment(&args.id)))
                .await?;
            if args.client.json {
                println!("{}", json!({"removed": args.id}));
            } else {
                println!(
                    "removed {} (a built-in skill is hidden: `skills show-again {}`)",
                    args.id, args.id
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::ShowAgain(args) => {
            let client = connect(&args.client);
            let path = format!("{SKILLS_PATH}/{}", encode_segment(&args.id));
            let mut skill: Value = client.get(&path).await?;
            let body = json!({
                "name": skill["name"], "description": skill["description"],
                "examples": skill["examples"], "hidden": false,
            });
            skill = client.put(&path, &body).await?;
            print_done(&args.client, &skill, "shown again");
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Tools(args) => {
            let client = connect(&args.client);
            let tools: Vec<Value> = client
                .get(&format!("{SKILLS_PATH}/{}/tools", encode_segment(&args.id)))
                .await?;
            if args.client.json {
                println!("{}", Value::from(tools));
                return Ok(ExitCode::SUCCESS);
            }
            let rows = tools
                .iter()
                .map(|t| {
                    let confidence = t["skills"]
                        .as_array()
                        .and_then(|s| s.iter().find(|s| s["skill_id"] == args.id.as_str()))
                        .and_then(|s| s["confidence"].as_f64())
                        .map(|c| format!("{c:.2}"))
                        .unwrap_or_default();
                    let primary = if t["primary_skill_id"] == args.id.as_str() {
                        "yes"
                    } else {
                        ""
                    };
                    vec![field(t, "id"), confidence, primary.to_owned()]
                })
                .collect();
            println!("{}", table(&["TOOL", "CONFIDENCE", "PRIMARY"], rows));
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Reclassify(args) => {
            let client = connect(&args.client);
            let body = if args.servers.is_empty() {
                json!({})
            } else {
                json!({"servers": args.servers})
            };
            let answer: Value = client
                .post(&format!("{SKILLS_PATH}/reclassify"), &body)
                .await?;
            if args.client.json {
                println!("{answer}");
            } else {
                println!(
                    "{} tool(s) queued for classification",
                    field(&answer, "queued")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Status(args) => {
            let client = connect(&args);
            let status: Value = client.get(&format!("{SKILLS_PATH}/status")).await?;
            if args.json {
                println!("{status:#}");
                return Ok(ExitCode::SUCCESS);
            }
            let keys = [
                "classified",
                "discovered",
                "classifying",
                "unclassified",
                "without_skill",
                "classifier",
                "waiting_for",
            ];
            let pairs: Vec<_> = keys.iter().map(|k| (*k, field(&status, k))).collect();
            println!("{}", fields(&pairs));
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Suggestions(args) => {
            let client = connect(&args);
            let queued: Vec<Value> = client.get(&format!("{SKILLS_PATH}/suggestions")).await?;
            if args.json {
                println!("{}", Value::from(queued));
                return Ok(ExitCode::SUCCESS);
            }
            let rows = queued
                .iter()
                .map(|s| {
                    let tools: Vec<String> = s["tool_ids"]
                        .as_array()
                        .map(|t| {
                            t.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default();
                    vec![
                        field(s, "id"),
                        field(s, "name"),
                        field(s, "description"),
                        tools.join(", "),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(&["ID", "SUGGESTED NAME", "DESCRIPTION", "TOOLS"], rows)
            );
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Accept(args) => {
            let client = connect(&args.client);
            let mut body = serde_json::Map::new();
            for (key, value) in [
                ("id", args.id),
                ("name", args.name),
                ("description", args.description),
            ] {
                if let Some(value) = value {
                    body.insert(key.into(), Value::String(value));
                }
            }
            if !args.examples.is_empty() {
                body.insert("examples".into(), json!(args.examples));
            }
            let path = format!("{SKILLS_PATH}/suggestions/{}/accept", args.suggestion);
            let skill: Value = client.post(&path, &Value::Object(body)).await?;
            print_done(&args.client, &skill, "added");
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_done(client: &ClientArgs, skill: &Value, what: &str) {
    if client.json {
        println!("{skill}");
    } else {
        println!("{} {what}", field(skill, "id"));
    }
}
