use super::*;
use crate::model::TransportType;

fn env(name: &str) -> Option<String> {
    match name {
        "TOKEN" => Some("t0k".into()),
        "HOME" => Some("/home/me".into()),
        "DATABASE_URL" => Some("postgres://db".into()),
        _ => None,
    }
}

fn parse_ok(text: &str) -> LoadedConfig {
    parse(text, Path::new("/etc/mcp/servers.json"), &env).unwrap_or_else(|err| panic!("{err}"))
}

fn parse_err(text: &str) -> ConfigError {
    parse(text, Path::new("/etc/mcp/servers.json"), &env).expect_err("must fail")
}

#[test]
fn claude_desktop_format() {
    let cfg = parse_ok(
        r#"{"globalShortcut": "", "mcpServers": {
            "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "$HOME"], "env": {"LOG_LEVEL": "info"}},
            "postgres": {"command": "node", "args": ["/srv/pg.js"], "env": {"DATABASE_URL": "${DATABASE_URL}"}}
        }}"#,
    );
    assert_eq!(cfg.servers.len(), 2);
    let fs = &cfg.servers[0];
    assert_eq!(fs.name, "filesystem");
    assert!(fs.auto_connect);
    let Transport::Stdio {
        command,
        args,
        env,
        cwd,
    } = &fs.transport
    else {
        panic!()
    };
    assert_eq!(command, "npx");
    assert_eq!(args[2], "/home/me");
    assert_eq!(env["LOG_LEVEL"], "info");
    assert!(cwd.is_none());
    assert_eq!(
        cfg.servers[1].transport.secrets()["DATABASE_URL"],
        "postgres://db"
    );
    assert_eq!(
        fs.source,
        ServerSource::ConfigFile {
            path: "/etc/mcp/servers.json".into()
        }
    );
}

#[test]
fn vs_code_format_with_types_urls_headers_and_disabled() {
    let cfg = parse_ok(
        r#"{"inputs": [], "servers": {
            "remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${env:TOKEN}"}},
            "streamy": {"type": "streamable-http", "url": "http://127.0.0.1:9000/mcp"},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:9001/sse"},
            "local": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "disabled": true}
        }}"#,
    );
    let by_name = |n: &str| cfg.servers.iter().find(|s| s.name == n).unwrap();
    assert_eq!(
        by_name("remote").transport.transport_type(),
        TransportType::Http
    );
    assert_eq!(
        by_name("remote").transport.secrets()["Authorization"],
        "Bearer t0k"
    );
    assert_eq!(
        by_name("streamy").transport.transport_type(),
        TransportType::Http
    );
    assert_eq!(
        by_name("legacy").transport.transport_type(),
        TransportType::Sse
    );
    assert!(
        !by_name("local").auto_connect,
        "disabled servers are stored but not connected"
    );
    assert!(by_name("remote").auto_connect);
}

#[test]
fn transport_is_inferred_from_url_when_type_is_missing() {
    let cfg = parse_ok(
        r#"{"mcpServers": {
            "a": {"url": "http://127.0.0.1:1/sse"},
            "b": {"url": "http://127.0.0.1:1/mcp"}
        }}"#,
    );
    assert_eq!(
        cfg.servers[0].transport.transport_type(),
        TransportType::Sse
    );
    assert_eq!(
        cfg.servers[1].transport.transport_type(),
        TransportType::Http
    );
    assert_eq!(cfg.warnings.len(), 2, "{:?}", cfg.warnings);
}

#[test]
fn both_sections_merge_and_names_are_normalised() {
    let cfg = parse_ok(
        r#"{"mcpServers": {"GitHub": {"command": "gh-mcp"}}, "servers": {"my.server": {"command": "x"}}}"#,
    );
    let names: Vec<_> = cfg.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["github", "my-server"]);
    assert!(
        cfg.warnings
            .iter()
            .any(|w| w.contains("\"GitHub\" is registered as \"github\"")),
        "{:?}",
        cfg.warnings
    );

    let err = parse_err(
        r#"{"mcpServers": {"github": {"command": "a"}}, "servers": {"GitHub": {"command": "b"}}}"#,
    );
    assert!(
        matches!(err, ConfigError::InvalidSchema { ref location, .. } if location == "$.servers.GitHub"),
        "{err}"
    );
}

#[test]
fn extensions_priority_description_health_and_cwd() {
    let cfg = parse_ok(
        r#"{"mcpServers": {"a": {"command": "x", "cwd": "data", "priority": 7, "description": "d",
            "healthCheckUrl": "http://127.0.0.1:1/health", "autoConnect": false, "envFile": ".env"}}}"#,
    );
    let s = &cfg.servers[0];
    assert_eq!(s.priority, 7);
    assert_eq!(s.description.as_deref(), Some("d"));
    assert_eq!(
        s.health_check_url.as_deref(),
        Some("http://127.0.0.1:1/health")
    );
    assert!(!s.auto_connect);
    let Transport::Stdio { cwd, .. } = &s.transport else {
        panic!()
    };
    assert_eq!(
        cwd.as_deref(),
        Some("/etc/mcp/data"),
        "relative cwd resolves against the config file"
    );
    assert!(
        cfg.warnings.iter().any(|w| w.contains("envFile")),
        "{:?}",
        cfg.warnings
    );
}

#[test]
fn file_not_found() {
    let err = load(Path::new("/definitely/not/here.json")).unwrap_err();
    assert_eq!(err.code(), "file_not_found");
    assert_eq!(
        err.to_string(),
        "Config file not found: /definitely/not/here.json"
    );
}

#[test]
fn invalid_json_reports_line_and_column() {
    let err = parse_err("{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}");
    let ConfigError::InvalidJson { line, column, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!((*line, *column), (3, 26));
    assert_eq!(err.code(), "invalid_json");
    assert!(err.to_string().contains("line 3, column 26"), "{err}");
    assert!(matches!(parse_err(""), ConfigError::InvalidJson { .. }));
}

#[test]
fn schema_errors_name_the_json_path() {
    let cases = [
        (r#"[]"#, "$"),
        (r#"{"other": 1}"#, "$.mcpServers"),
        (r#"{"mcpServers": []}"#, "$.mcpServers"),
        (r#"{"mcpServers": {"a": "npx"}}"#, "$.mcpServers.a"),
        (
            r#"{"mcpServers": {"a": {"args": []}}}"#,
            "$.mcpServers.a.command",
        ),
        (
            r#"{"mcpServers": {"a": {"command": 5}}}"#,
            "$.mcpServers.a.command",
        ),
        (
            r#"{"mcpServers": {"a": {"command": "x", "args": "-y"}}}"#,
            "$.mcpServers.a.args",
        ),
        (
            r#"{"mcpServers": {"a": {"command": "x", "args": ["ok", 3]}}}"#,
            "$.mcpServers.a.args[1]",
        ),
        (
            r#"{"mcpServers": {"a": {"command": "x", "env": []}}}"#,
            "$.mcpServers.a.env",
        ),
        (
            r#"{"mcpServers": {"a": {"command": "x", "env": {"N": 1}}}}"#,
            "$.mcpServers.a.env.N",
        ),
        (
            r#"{"mcpServers": {"a": {"type": "carrier-pigeon", "command": "x"}}}"#,
            "$.mcpServers.a.type",
        ),
        (
            r#"{"mcpServers": {"a": {"type": "sse"}}}"#,
            "$.mcpServers.a.url",
        ),
        (
            r#"{"mcpServers": {"a": {"type": "http", "url": "ftp://x"}}}"#,
            "$.mcpServers.a.url",
        ),
        (
            r#"{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}"#,
            "$.mcpServers.a",
        ),
        (
            r#"{"mcpServers": {"a": {"command": "x", "disabled": "yes"}}}"#,
            "$.mcpServers.a.disabled",
        ),
        (
            r#"{"mcpServers": {"a": {"command": "x", "priority": 1.5}}}"#,
            "$.mcpServers.a.priority",
        ),
        (
            r#"{"mcpServers": {"a": {"url": "http://h/mcp", "headers": {"Bad Name": "v"}}}}"#,
            "$.mcpServers.a.headers.Bad Name",
        ),
        (
            r#"{"mcpServers": {"!!!": {"command": "x"}}}"#,
            "$.mcpServers[\"!!!\"]",
        ),
        (
            r#"{"mcpServers": {"a": {"command": "${input:tok}"}}}"#,
            "$.mcpServers.a.command",
        ),
    ];
    for (text, expected) in cases {
        match parse_err(text) {
            ConfigError::InvalidSchema {
                location, message, ..
            } => {
                assert_eq!(location, expected, "{text}: {message}");
                assert!(!message.is_empty());
            }
            other => panic!("{text}: expected a schema error, got {other}"),
        }
    }
}

#[test]
fn missing_variables_name_the_variable_and_path() {
    let cases = [
        (
            r#"{"mcpServers": {"pg": {"command": "x", "env": {"DATABASE_URL": "${NOT_SET}"}}}}"#,
            "$.mcpServers.pg.env.DATABASE_URL",
        ),
        (
            r#"{"mcpServers": {"pg": {"command": "$NOT_SET"}}}"#,
            "$.mcpServers.pg.command",
        ),
        (
            r#"{"mcpServers": {"pg": {"command": "x", "args": ["a", "--t=${env:NOT_SET}"]}}}"#,
            "$.mcpServers.pg.args[1]",
        ),
        (
            r#"{"mcpServers": {"pg": {"url": "http://${NOT_SET}/mcp"}}}"#,
            "$.mcpServers.pg.url",
        ),
        (
            r#"{"mcpServers": {"pg": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer $NOT_SET"}}}}"#,
            "$.mcpServers.pg.headers.Authorization",
        ),
    ];
    for (text, expected) in cases {
        let err = parse_err(text);
        let ConfigError::MissingEnvVar {
            variable, location, ..
        } = &err
        else {
            panic!("{text}: {err}")
        };
        assert_eq!(variable, "NOT_SET");
        assert_eq!(location, expected);
        assert_eq!(err.code(), "missing_env_var");
        assert!(
            err.to_string()
                .starts_with("Missing environment variable: NOT_SET"),
            "{err}"
        );
    }
}

#[test]
fn defaults_cover_missing_variables() {
    let cfg = parse_ok(r#"{"mcpServers": {"a": {"command": "x", "args": ["${PORT:-8080}"]}}}"#);
    let Transport::Stdio { args, .. } = &cfg.servers[0].transport else {
        panic!()
    };
    assert_eq!(args, &["8080"]);
}

#[test]
fn profiles_are_read_and_checked_where_they_are() {
    let cfg = parse_ok(
        r#"{"mcpServers": {}, "profiles": {
            "coding": {"servers": ["github"], "excludeTools": ["github.delete_*"]},
            "readers": {"tools": ["*__read_*"], "description": "read only"}
        }}"#,
    );
    assert_eq!(cfg.profiles.len(), 2);
    let coding = &cfg.profiles[0];
    assert_eq!(coding.name, "coding");
    assert_eq!(coding.servers.as_deref(), Some(&["github".to_owned()][..]));
    assert_eq!(coding.exclude_tools, ["github.delete_*"]);
    assert!(coding.tools.is_none() && coding.skills.is_none());
    assert!(parse_ok(r#"{"mcpServers": {}}"#).profiles.is_empty());

    for (text, location) in [
        (r#"{"mcpServers": {}, "profiles": []}"#, "$.profiles"),
        (
            r#"{"mcpServers": {}, "profiles": {"Bad": {}}}"#,
            "$.profiles.Bad",
        ),
        (
            r#"{"mcpServers": {}, "profiles": {"p": {"tool": []}}}"#,
            "$.profiles.p",
        ),
        (
            r#"{"mcpServers": {}, "profiles": {"p": {"tools": [""]}}}"#,
            "$.profiles.p.tools[0]",
        ),
    ] {
        match parse_err(text) {
            ConfigError::InvalidSchema { location: at, .. } => {
                assert!(at.starts_with(location), "{text}: {at}")
            }
            other => panic!("{text}: {other}"),
        }
    }
}

#[test]
fn the_aggregators_own_entry_in_a_clients_file_is_skipped() {
    let cfg = parse_ok(
        r#"{"mcpServers": {
            "aggregator": {"command": "/usr/bin/mcp-aggregator", "args": ["stdio"]},
            "windows": {"command": "C:\\tools\\mcp-aggregator.exe", "args": ["stdio"]},
            "wrapped": {"command": "bash", "args": ["-lc", "exec mcp-aggregator stdio"]},
            "env": {"command": "/usr/bin/env", "args": ["mcp-aggregator", "stdio"]},
            "aggregators-docs": {"command": "npx", "args": ["-y", "@acme/mcp-aggregator-docs"]},
            "time": {"command": "uvx", "args": ["mcp-server-time"]}
        }}"#,
    );
    let names: Vec<&str> = cfg.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["aggregators-docs", "time"]);
    assert!(
        cfg.warnings
            .iter()
            .any(|w| w.contains("aggregator") && w.contains("skipped")),
        "{:?}",
        cfg.warnings
    );
}
