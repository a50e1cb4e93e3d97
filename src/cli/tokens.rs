//! `mcp-aggregator tokens`: named API tokens with scopes, through the
//! running daemon.

use serde_json::{Value, json};
use std::process::ExitCode;

use super::admin_args::{ScopeArg, TokensCommand};
use super::client::{connect, encode_segment};
use super::error::CliError;
use super::output::{field, table};

const TOKENS_PATH: &str = "/api/v1/aggregator/tokens";

pub(super) async fn run(command: TokensCommand) -> Result<ExitCode, CliError> {
    match command {
        TokensCommand::Create(args) => {
            let scope = match args.scope {
                ScopeArg::Read => "read",
                ScopeArg::Mcp => "mcp",
                ScopeArg::Admin => "admin",
            };
            if args.profile.is_some() && scope != "mcp" {
                return Err(CliError::Usage(
                    "--profile binds an mcp token to a view: use it with --scope mcp".to_owned(),
                ));
            }
            let client = connect(&args.client);
            let body = json!({"name": args.name, "scope": scope, "profile": args.profile});
            let created: Value = client.post(TOKENS_PATH, &body).await?;
            if args.client.json {
                println!("{created:#}");
            } else {
                println!("{}", field(&created, "secret"));
                eprintln!(
                    "token {} (scope {scope}) created; the line above is its secret, shown this once: \
send it as `Authorization: Bearer <secret>`",
                    field(&created, "name")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        TokensCommand::List(args) => {
            let client = connect(&args);
            let tokens: Vec<Value> = client.get(TOKENS_PATH).await?;
            if args.json {
                println!("{}", Value::from(tokens));
            } else if tokens.is_empty() {
                println!("no named tokens (the data dir's token is the admin one)");
            } else {
                let rows = tokens
                    .iter()
                    .map(|t| {
                        vec![
                            field(t, "name"),
                            field(t, "scope"),
                            field(t, "profile"),
                            field(t, "created_at"),
                            field(t, "created_by"),
                        ]
                    })
                    .collect();
                println!(
                    "{}",
                    table(&["NAME", "SCOPE", "PROFILE", "CREATED", "BY"], rows)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        TokensCommand::Revoke(args) => {
            let client = connect(&args.client);
            client
                .delete(&format!("{TOKENS_PATH}/{}", encode_segment(&args.name)))
                .await?;
            if !args.client.json {
                println!("token {} revoked", args.name);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
