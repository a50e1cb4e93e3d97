//! Structured logs to stderr (stdout is the MCP channel in stdio mode), and
//! the optional OpenTelemetry traces of calls: spans of the target
//! `TRACE_TARGET` (front door → router → server request), exported over
//! OTLP/HTTP (JSON) when an endpoint is configured. They are trace-level
//! spans of their own target: with no exporter no layer wants them, so a
//! call pays only a disabled callsite check.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer, Registry};

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// What is logged when `RUST_LOG` is not set. rmcp logs every notification
/// at INFO, so its target defaults to `warn`.
pub const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// The target of the spans exported as traces.
pub const TRACE_TARGET: &str = "mcp_aggregator::otel";

/// The trace exporter, when one runs; `shutdown` sends what is left.
#[derive(Default)]
pub struct Telemetry {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still buffered (bounded by the exporter's timeout)
    /// off the async threads, whose runtime carries the export.
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(err) = provider.shutdown() {
                    tracing::warn!("the trace exporter did not shut down cleanly: {err}");
                }
            })
            .await;
        }
    }
}

/// Installs the global subscriber; `RUST_LOG` overrides `default_filter`.
/// With `otlp` (an OTLP/HTTP base URL such as `http://localhost:4318`, or
/// the full `…/v1/traces`), calls are traced there. Must run inside the
/// Tokio runtime: exports are sent on it.
pub fn init(format: LogFormat, default_filter: &str, otlp: Option<&str>) -> Telemetry {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| OneLine(std::io::stderr()))
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    let (traces, provider) = match otlp.map(exporter) {
        None => (None, None),
        Some(Ok(provider)) => {
            let tracer = provider.tracer("mcp-aggregator");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(Targets::new().with_target(TRACE_TARGET, tracing::Level::TRACE))
                .boxed();
            (Some(layer), Some(provider))
        }
        Some(Err(err)) => {
            eprintln!("warning: traces are not exported: {err}");
            (None, None)
        }
    };
    // A second init (tests embedding the library) is harmless: keep the first.
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init();
    Telemetry { provider }
}

/// Writes each text log line as one line: what a server wrote into it (a
/// tool name, an error, a line of its stderr) cannot break it in two and
/// forge a line of ours, nor drive the terminal that shows it. The text
/// layer hands over one whole event per write, ending in its newline.
/// (JSON lines need nothing: the JSON writer escapes every control
/// character.)
struct OneLine<W>(W);

impl<W: std::io::Write> std::io::Write for OneLine<W> {
    fn write(&mut self, event: &[u8]) -> std::io::Result<usize> {
        let (text, ends_line) = match event.strip_suffix(b"\n") {
            Some(text) => (text, true),
            None => (event, false),
        };
        let text = String::from_utf8_lossy(text);
        if !text.chars().any(crate::model::printable::is_hostile) {
            self.0.write_all(event)?;
            return Ok(event.len());
        }
        // One write: another thread's line cannot land inside this one.
        let mut shown = crate::model::printable::printable(&text);
        if ends_line {
            shown.push('\n');
        }
        self.0.write_all(shown.as_bytes())?;
        Ok(event.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The endpoint of the traces under an OTLP/HTTP base URL.
fn traces_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    }
}

fn exporter(endpoint: &str) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, String> {
    let url = traces_url(endpoint);
    url::Url::parse(&url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| format!("{endpoint:?} is not an http(s) URL"))?;
    let handle = tokio::runtime::Handle::try_current()
        .map_err(|_| "no async runtime to send traces on".to_owned())?;
    let client = RuntimeClient {
        client: crate::http_client::client(std::time::Duration::from_secs(10)),
        handle,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(url)
        .build()
        .map_err(|err| err.to_string())?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("mcp-aggregator")
        .build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Sends the exporter's requests with our HTTP client on the process's
/// runtime (the SDK exports from a thread of its own).
#[derive(Debug)]
struct RuntimeClient {
    client: reqwest::Client,
    handle: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let sending = self
            .client
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .timeout(std::time::Duration::from_secs(10));
        let (status, body) = self
            .handle
            .spawn(async move {
                let answer = sending.send().await?;
                let status = answer.status();
                Ok::<_, reqwest::Error>((status, answer.bytes().await?))
            })
            .await??;
        Ok(Response::builder().status(status).body(body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_stays_one_line_whatever_it_holds() {
        use std::io::Write as _;
        let mut out = OneLine(Vec::new());
        out.write_all(b"WARN refused item=evil\n2026-01-01 ERROR forged \x1b[2J\n")
            .unwrap();
        out.write_all(b"INFO plain\n").unwrap();
        let written = String::from_utf8(out.0).unwrap();
        assert_eq!(
            written,
            "WARN refused item=evil\\u{a}2026-01-01 ERROR forged \\u{1b}[2J\nINFO plain\n"
        );
    }

    #[test]
    fn a_base_url_gets_the_traces_path() {
        assert_eq!(
            traces_url("http://localhost:4318"),
            "http://localhost:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://localhost:4318/"),
            "http://localhost:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }
}
