//! `mcp-aggregator profiles …`: views (which servers, tools and skills a
//! client that picks one sees), through the daemon's API.

use serde_json::{Value, json};
use std::process::ExitCode;

use super::admin_args::{ProfileSetArgs, ProfilesCommand};
use super::client::{connect, encode_segment};
use super::error::CliError;
use super::output::{field, fields, table};

const PROFILES_PATH: &str = "/api/v1/profiles";

/// A list as shown: its patterns, or what leaving it out means.
fn patterns(profile: &Value, key: &str, absent: &str) -> String {
    match profile[key].as_array() {
        Some(list) if list.is_empty() => "(none)".to_owned(),
        Some(list) => list
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        None => absent.to_owned(),
    }
}

pub(super) async fn run(command: ProfilesCommand) -> Result<ExitCode, CliError> {
    match command {
        ProfilesCommand::List(args) => {
            let client = connect(&args);
            let profiles: Vec<Value> = client.get(PROFILES_PATH).await?;
            if args.json {
                println!("{}", Value::from(profiles));
                return Ok(ExitCode::SUCCESS);
            }
            let rows = profiles
                .iter()
                .map(|p| {
                    vec![
                        field(p, "name"),
                        patterns(p, "servers", "all"),
                        patterns(p, "tools", "all"),
                        patterns(p, "skills", "any"),
                        p["source"].as_str().unwrap_or("api").to_owned(),
                    ]
                })
                .collect();
            println!(
                "{}",
                table(&["NAME", "SERVERS", "TOOLS", "SKILLS", "DEFINED IN"], rows)
            );
            Ok(ExitCode::SUCCESS)
        }
        ProfilesCommand::Show(args) => {
            let client = connect(&args.client);
            let path = format!("{PROFILES_PATH}/{}", encode_segment(&args.name));
            let profile: Value = client.get(&path).await?;
            if args.client.json {
                println!("{profile}");
                return Ok(ExitCode::SUCCESS);
            }
            show(&profile);
            Ok(ExitCode::SUCCESS)
        }
        ProfilesCommand::Set(args) => set(args).await,
        ProfilesCommand::Remove(args) => {
            let client = connect(&args.client);
            let path = format!("{PROFILES_PATH}/{}", encode_segment(&args.name));
            client.delete(&path).await?;
            println!("Removed profile {}", args.name);
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn set(args: ProfileSetArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let given = |list: Vec<String>| (!list.is_empty()).then_some(list);
    let body = json!({
        "description": args.description,
        "servers": given(args.servers),
        "tools": given(args.tools),
        "exclude_tools": args.exclude_tools,
        "skills": given(args.skills),
    });
    let path = format!("{PROFILES_PATH}/{}", encode_segment(&args.name));
    let profile: Value = client.put(&path, &body).await?;
    if let Some(warning) = profile["warning"].as_str() {
        eprintln!("warning: {warning}");
    }
    if args.client.json {
        println!("{profile}");
    } else {
        show(&profile);
    }
    Ok(ExitCode::SUCCESS)
}

fn show(profile: &Value) {
    let tools: Vec<&str> = profile["visible_tools"]
        .as_array()
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    println!(
        "{}",
        fields(&[
            ("name", field(profile, "name")),
            ("description", field(profile, "description")),
            ("servers", patterns(profile, "servers", "all")),
            ("tools", patterns(profile, "tools", "all")),
            (
                "exclude tools",
                patterns(profile, "exclude_tools", "(none)")
            ),
            ("skills", patterns(profile, "skills", "any")),
            (
                "defined in",
                profile["source"].as_str().unwrap_or("api").to_owned()
            ),
            ("mcp endpoint", field(profile, "mcp_path")),
            (
                "visible tools",
                format!("{} {}", tools.len(), tools.join(", "))
            ),
        ])
    );
}
