//! `mcp-aggregator login NAME` / `logout NAME`: a server's OAuth login,
//! through the daemon's API (the daemon receives the callback and keeps
//! the tokens; this command only shows the way and waits).

use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::admin_args::{LoginArgs, ServerNameArgs};
use super::client::{connect, encode_segment};
use super::error::CliError;
use crate::model::printable::printable;

const SERVERS_PATH: &str = "/api/v1/aggregator/servers";
const POLL_EVERY: Duration = Duration::from_millis(500);

pub(super) async fn login(args: LoginArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let server = format!("{SERVERS_PATH}/{}", encode_segment(&args.name));
    let body = if args.device {
        json!({"device": true})
    } else {
        json!({})
    };
    let started: Value = client.post(&format!("{server}/login"), &body).await?;
    let url = started["authorization_url"].as_str().unwrap_or_default();
    if args.client.json && args.wait == 0 {
        println!("{started}");
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "{}",
        instructions(url, started["user_code"].as_str(), &args.name)
    );
    if !args.device && !args.no_browser && open_browser(url) {
        eprintln!("(opened in your browser)");
    }
    if args.wait == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "Waiting for the login to finish (Ctrl-C to stop waiting; the URL stays valid for {} minutes)…",
        started["expires_in"].as_u64().unwrap_or(900) / 60
    );
    let deadline = Instant::now() + Duration::from_secs(args.wait);
    loop {
        let record: Value = client.get(&server).await?;
        match record["auth"]["state"].as_str() {
            Some("authorized") => {
                if args.client.json {
                    println!("{}", record["auth"]);
                } else {
                    println!("Logged in to {}.", args.name);
                }
                return Ok(ExitCode::SUCCESS);
            }
            Some("failed") => {
                return Err(CliError::Failed(printable(
                    record["auth"]["detail"]
                        .as_str()
                        .unwrap_or("the login failed"),
                )));
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err(CliError::Failed(format!(
                "no login within {} s; run `mcp-aggregator login {}` again",
                args.wait, args.name
            )));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

pub(super) async fn logout(args: ServerNameArgs) -> Result<ExitCode, CliError> {
    let client = connect(&args.client);
    let path = format!("{SERVERS_PATH}/{}/logout", encode_segment(&args.name));
    let answer: Value = client.post(&path, &json!({})).await?;
    if args.client.json {
        println!("{answer}");
    } else if answer["logged_out"].as_bool() == Some(true) {
        println!("Logged out of {}: its tokens are forgotten.", args.name);
    } else {
        println!("{} held no login.", args.name);
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens `url` in the desktop's browser, when there is a desktop.
/// Where to log in, as shown: what the authorization server sent (its
/// URL, a device login's code) never as a terminal's escape sequences.
fn instructions(url: &str, user_code: Option<&str>, server: &str) -> String {
    let url = printable(url);
    match user_code {
        Some(code) => format!(
            "On any device with a browser, open\n\n  {url}\n\nand enter the code  {}  to log in to {server}.\n",
            printable(code)
        ),
        None => format!("Open this URL to log in to {server}:\n\n  {url}\n"),
    }
}

fn open_browser(url: &str) -> bool {
    let graphical = std::env::var_os("DISPLAY").is_some()
        || std::env::var_os("WAYLAND_DISPLAY").is_some()
        || cfg!(target_os = "macos");
    // Only web pages: a URL from a server's metadata is never handed to
    // the desktop's launcher with another scheme.
    let web = url.starts_with("https://") || url.starts_with("http://");
    if !graphical || !web {
        return false;
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(|mut child| {
            // Reaped in the background: the opener returns at once.
            std::thread::spawn(move || child.wait());
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_authorization_servers_text_is_shown_not_acted_on() {
        let shown = super::instructions(
            "https://as.example/device\u{1b}[2J",
            Some("CODE\u{1b}]0;PWNED\u{7}"),
            "gh",
        );
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "{shown}"
        );
        assert!(
            shown.contains("https://as.example/device\\u{1b}[2J"),
            "{shown}"
        );
        assert!(shown.contains("CODE\\u{1b}]0;PWNED\\u{7}"), "{shown}");
    }
}
