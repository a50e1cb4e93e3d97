//! `mcp-aggregator search` and `reindex`: finding tools through the
//! daemon, and rebuilding the search indexes (inside the daemon when one
//! runs, else in this process).

use serde_json::{Value, json};
use std::process::ExitCode;

use super::admin_args::{ClientArgs, SearchArgs, SearchModeArg};
use super::client::connect;
use super::error::CliError;
use super::output::{field, table};
use crate::paths::{self, DaemonInfo};

pub(super) async fn search(args: SearchArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let mode = match args.mode {
        SearchModeArg::Hybrid => "hybrid",
        SearchModeArg::Keyword => "keyword",
        SearchModeArg::Semantic => "semantic",
    };
    let mut body = json!({"query": args.query, "limit": args.limit, "mode": mode});
    if !args.servers.is_empty() {
        body["server_filter"] = json!(args.servers);
    }
    if !args.skills.is_empty() {
        body["skill_filter"] = json!(args.skills);
    }
    let answer: Value = client.post("/api/v1/search", &body).await?;
    if args.client.json {
        println!("{answer:#}");
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(warning) = answer.pointer("/metadata/warning").and_then(Value::as_str) {
        eprintln!("warning: {warning}");
    }
    let tools = answer
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if tools.is_empty() {
        println!(
            "no tools found among {} tool(s) of {} available server(s)",
            field(&answer["metadata"], "total_tools_searched"),
            field(&answer["metadata"], "servers_searched")
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows = tools
        .iter()
        .map(|t| {
            let score = t.get("score").and_then(Value::as_f64).unwrap_or_default();
            let description: String = field(t, "description")
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(70)
                .collect();
            vec![
                format!("{score:.3}"),
                field(t, "name"),
                field(&t["source_server"], "status"),
                field(t, "primary_skill_id"),
                description,
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["SCORE", "NAME", "SERVER STATUS", "SKILL", "DESCRIPTION"],
            rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// Rebuilds inside the daemon when one answers, else here.
pub(super) async fn reindex(args: ClientArgs) -> Result<ExitCode, CliError> {
    let data_dir = paths::resolve_data_dir(args.data_dir.data_dir.as_deref());
    let daemon_running =
        args.url.is_some() || data_dir.as_deref().and_then(DaemonInfo::read).is_some();
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} tools")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message("indexing");
    let status = if daemon_running {
        let client = connect(&args);
        let _: Value = client.post("/api/v1/search/reindex", &json!({})).await?;
        loop {
            let status: Value = client.get("/api/v1/search/status").await?;
            bar.set_length(status["total_tools"].as_u64().unwrap_or(0));
            bar.set_position(status["indexed_tools"].as_u64().unwrap_or(0));
            if status["syncing"] == json!(false) {
                break status;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    } else {
        let Some(data_dir) = data_dir else {
            return Err(CliError::Usage(
                "no data dir: pass --data-dir or set MCP_AGGREGATOR_DATA_DIR".into(),
            ));
        };
        local_reindex(data_dir, bar.clone()).await?
    };
    bar.finish_and_clear();
    if args.json {
        println!("{status}");
    } else {
        println!(
            "indexed {} tool(s){}",
            field(&status, "indexed_tools"),
            if status["semantic"] == json!(true) {
                String::new()
            } else {
                format!(
                    " by keyword only: {}",
                    status
                        .get("warning")
                        .and_then(Value::as_str)
                        .unwrap_or("the model is unavailable")
                )
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn local_reindex(
    data_dir: std::path::PathBuf,
    bar: indicatif::ProgressBar,
) -> Result<Value, CliError> {
    let failed = |err: &dyn std::fmt::Display| CliError::Failed(err.to_string());
    let opened = tokio::task::spawn_blocking(move || crate::daemon::open_search_index(&data_dir))
        .await
        .map_err(|e| failed(&e))?
        .map_err(|e| failed(&e))?;
    let mut progress = opened.progress();
    let index = opened.clone();
    let work = tokio::task::spawn_blocking(move || index.sync(true));
    tokio::pin!(work);
    let result = loop {
        tokio::select! {
            result = &mut work => break result,
            changed = progress.changed() => {
                if changed.is_err() {
                    continue;
                }
                let now = progress.borrow().clone();
                bar.set_length(now.total_tools as u64);
                bar.set_position(now.indexed_tools as u64);
            }
        }
    };
    result.map_err(|e| failed(&e))?.map_err(|e| failed(&e))?;
    let done = opened.progress().borrow().clone();
    Ok(json!({
        "indexed_tools": done.indexed_tools,
        "total_tools": done.total_tools,
        "generation": done.generation,
        "syncing": false,
        "semantic": opened.semantic_available(),
        "warning": opened.model_warning(),
    }))
}
