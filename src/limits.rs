//! Bounds on what a peer (a client, a server) can make the aggregator hold:
//! the one message-size limit every reader shares (stdio lines both ways,
//! `/mcp` bodies, downstream HTTP bodies and SSE events), the bounded line
//! reader they use, and the capacities of the queues between servers and
//! clients. Nothing a peer sends grows without bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _};

/// Default for `--max-message-bytes`: a 1,000-tool list is ~2 MB; a large
/// resource (base64) fits.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;
/// Smallest accepted setting (a message must at least hold an envelope).
pub const MIN_MESSAGE_BYTES: usize = 64 * 1024;

/// Messages queued for one client before it counts as falling behind:
/// further notifications are dropped, and an answer that cannot be queued
/// within `CLIENT_STALL` disconnects the client.
pub const CLIENT_QUEUE: usize = 512;
/// How long an answer may wait for room in a client's queue.
pub const CLIENT_STALL: std::time::Duration = std::time::Duration::from_secs(30);
/// Requests one client may have running at once; the next waits (a client
/// that sends without reading is slowed down, never buffered without end).
pub const CLIENT_CONCURRENCY: usize = 256;
/// Progress notifications of one call queued between server and client.
pub const PROGRESS_QUEUE: usize = 256;
/// A server's notifications (log messages, resource updates) queued for the
/// supervisor before they are dropped.
pub const SERVER_NOTIFICATIONS: usize = 1024;

/// Default for `--max-catalog-bytes`: what one server's discovery (its
/// tools, resources, templates and prompts together) may send. A
/// 1,000-tool list is ~2 MB.
pub const DEFAULT_MAX_CATALOG_BYTES: usize = 32 * 1024 * 1024;
/// Default for `--max-definition-bytes`: one tool, resource, template or
/// prompt definition. The largest real tool definitions (long schemas)
/// are tens of kilobytes.
pub const DEFAULT_MAX_DEFINITION_BYTES: usize = 256 * 1024;

static MAX_MESSAGE_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_MESSAGE_BYTES);
static MAX_CATALOG_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_CATALOG_BYTES);
static MAX_DEFINITION_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_DEFINITION_BYTES);

/// The largest message (line, body, event) accepted from any peer.
pub fn max_message_bytes() -> usize {
    MAX_MESSAGE_BYTES.load(Ordering::Relaxed)
}

/// Sets the limit for the whole process (at start, from the command line).
pub fn set_max_message_bytes(bytes: usize) {
    MAX_MESSAGE_BYTES.store(bytes.max(MIN_MESSAGE_BYTES), Ordering::Relaxed);
}

/// The most one server's discovery may send, all its lists together.
pub fn max_catalog_bytes() -> usize {
    MAX_CATALOG_BYTES.load(Ordering::Relaxed)
}

/// The largest single definition (tool, resource, template, prompt) kept.
pub fn max_definition_bytes() -> usize {
    MAX_DEFINITION_BYTES.load(Ordering::Relaxed)
}

/// Sets the discovery bounds for the whole process (at start).
pub fn set_discovery_bytes(catalog: usize, definition: usize) {
    MAX_CATALOG_BYTES.store(catalog.max(MIN_MESSAGE_BYTES), Ordering::Relaxed);
    MAX_DEFINITION_BYTES.store(definition.max(1024), Ordering::Relaxed);
}

/// What one server's stderr may put in the log: this many bytes a second
/// on average, in bursts of up to `STDERR_LOG_BURST` (a line counts at
/// least `STDERR_LINE_COST`, so a flood of empty lines is bounded too).
pub const STDERR_LOG_BYTES_PER_SEC: u64 = 64 * 1024;
pub const STDERR_LOG_BURST: u64 = 1024 * 1024;
pub const STDERR_LINE_COST: u64 = 128;

/// A token bucket in bytes: what a peer may put somewhere (the log) per
/// second, with bursts; what does not fit is the caller's to drop.
#[derive(Debug)]
pub struct ByteRate {
    per_sec: u64,
    burst: u64,
    tokens: f64,
    last: std::time::Instant,
}

impl ByteRate {
    pub fn new(per_sec: u64, burst: u64) -> ByteRate {
        ByteRate {
            per_sec,
            burst,
            tokens: burst as f64,
            last: std::time::Instant::now(),
        }
    }

    /// Takes `bytes` if they fit now; false if they are to be dropped.
    pub fn take(&mut self, bytes: u64, now: std::time::Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.per_sec as f64).min(self.burst as f64);
        if self.tokens >= bytes as f64 {
            self.tokens -= bytes as f64;
            true
        } else {
            false
        }
    }
}

/// Line buffer capacity `read_line` keeps between lines (most messages
/// are far smaller).
const KEEP_LINE_CAPACITY: usize = 64 * 1024;

/// How many of an over-long line's last bytes `read_line` keeps: enough
/// for the `"jsonrpc":"2.0","id":…}` a TypeScript peer ends a message with.
pub const TAIL_BYTES: usize = 128;

/// One line read by `read_line`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// The input ended (nothing was read).
    End,
    /// A whole line is in the buffer (newline included when there was one).
    Complete,
    /// The line was longer than the limit: the buffer holds its first
    /// `max` bytes, the rest was read and thrown away but for its last
    /// bytes (the tail).
    TooLong(Tail),
}

/// The last (at most `TAIL_BYTES`) bytes of a line, newline included.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    bytes: [u8; TAIL_BYTES],
    len: usize,
}

impl Tail {
    const EMPTY: Tail = Tail {
        bytes: [0; TAIL_BYTES],
        len: 0,
    };

    /// The tail of a whole line.
    pub fn of(line: &[u8]) -> Tail {
        let mut tail = Tail::EMPTY;
        tail.push(line);
        tail
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Keeps the last `TAIL_BYTES` of what was kept and `more`.
    fn push(&mut self, more: &[u8]) {
        if more.len() >= TAIL_BYTES {
            self.bytes.copy_from_slice(&more[more.len() - TAIL_BYTES..]);
            self.len = TAIL_BYTES;
            return;
        }
        let keep = self.len.min(TAIL_BYTES - more.len());
        self.bytes.copy_within(self.len - keep..self.len, 0);
        self.bytes[keep..keep + more.len()].copy_from_slice(more);
        self.len = keep + more.len();
    }
}

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tail({:?})", String::from_utf8_lossy(self.as_slice()))
    }
}

/// Reads one line into `out` (cleared first), holding at most `max` bytes
/// of it however long it is: the rest is consumed and discarded, so a peer
/// that sends a gigabyte without a newline costs `max` bytes, not a gigabyte.
///
/// Not tokio-util's `LinesCodec`/`AnyDelimiterCodec` with a max length,
/// though that frames the same way: the codec throws an over-long line away
/// whole, where a server's stderr is logged by its first `max` bytes; and
/// its buffer keeps the capacity of the longest line it ever framed, where
/// this one gives it back (one large `tools/list` per server would
/// otherwise stay allocated for the connection's life).
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    out: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    out.clear();
    // A buffer keeps the capacity of the longest line it ever held: one
    // tools/list of a large server (a megabyte) would stay allocated for
    // the life of the connection, per server (200 MB with 200 servers).
    if out.capacity() > KEEP_LINE_CAPACITY {
        *out = Vec::new();
    }
    let mut consumed = 0usize;
    let mut too_long = false;
    let mut tail = Tail::EMPTY;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (consumed, too_long) {
                (0, _) => Line::End,
                (_, true) => Line::TooLong(tail),
                (_, false) => Line::Complete,
            });
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(pos) => (&available[..=pos], true),
            None => (available, false),
        };
        let room = max.saturating_sub(out.len());
        if chunk.len() > room {
            too_long = true;
        }
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        tail.push(chunk);
        let used = chunk.len();
        reader.consume(used);
        consumed += used;
        if done {
            return Ok(if too_long {
                Line::TooLong(tail)
            } else {
                Line::Complete
            });
        }
    }
}

/// Counts bytes between SSE event boundaries (a blank line) and says when
/// one event passes the limit, without keeping the bytes.
#[derive(Debug, Default)]
pub struct EventSizeCheck {
    since_boundary: usize,
    /// The previous byte ended a line (the next terminator is a blank line).
    at_line_start: bool,
    /// The previous byte was `\r` (a `\n` after it is the same terminator).
    after_cr: bool,
}

impl EventSizeCheck {
    /// Feeds a chunk; false if an event in it grew past `max` bytes.
    pub fn feed(&mut self, chunk: &[u8], max: usize) -> bool {
        let mut within = true;
        for &b in chunk {
            self.since_boundary += 1;
            within &= self.since_boundary <= max;
            match b {
                b'\n' if self.after_cr => {
                    self.after_cr = false;
                    // The `\n` of a `\r\n` that ended an event belongs to it.
                    if self.since_boundary == 1 {
                        self.since_boundary = 0;
                    }
                }
                b'\n' | b'\r' => {
                    if self.at_line_start {
                        self.since_boundary = 0;
                    }
                    self.at_line_start = true;
                    self.after_cr = b == b'\r';
                }
                _ => {
                    self.at_line_start = false;
                    self.after_cr = false;
                }
            }
        }
        within
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        let mut reader = tokio::io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        let mut seen = Vec::new();
        loop {
            let line = read_line(&mut reader, &mut out, max).await.unwrap();
            if line == Line::End {
                return seen;
            }
            seen.push((line, out.clone()));
        }
    }

    #[tokio::test]
    async fn a_buffer_does_not_keep_the_size_of_its_longest_line() {
        let mut input = vec![b'x'; 1 << 20];
        input.extend_from_slice(b"\nsmall\n");
        let mut reader = tokio::io::BufReader::new(input.as_slice());
        let mut out = Vec::new();
        let line = read_line(&mut reader, &mut out, 2 << 20).await.unwrap();
        assert_eq!((line, out.len()), (Line::Complete, (1 << 20) + 1));
        let line = read_line(&mut reader, &mut out, 2 << 20).await.unwrap();
        assert_eq!(
            (line, out.as_slice()),
            (Line::Complete, b"small\n".as_slice())
        );
        assert!(out.capacity() <= KEEP_LINE_CAPACITY, "{}", out.capacity());
    }

    #[tokio::test]
    async fn long_lines_are_cut_and_reported_and_the_next_line_is_whole() {
        let got = lines(b"short\n0123456789abcdef\nok\nlast", 8).await;
        assert_eq!(
            got,
            vec![
                (Line::Complete, b"short\n".to_vec()),
                (
                    Line::TooLong(Tail::of(b"0123456789abcdef\n")),
                    b"01234567".to_vec()
                ),
                (Line::Complete, b"ok\n".to_vec()),
                (Line::Complete, b"last".to_vec()),
            ]
        );
        assert_eq!(
            lines(b"0123456789", 4).await,
            vec![(Line::TooLong(Tail::of(b"0123456789")), b"0123".to_vec())]
        );
        assert!(lines(b"", 4).await.is_empty());
        // Read four bytes at a time, a long line keeps its last bytes.
        let long: Vec<u8> = (0..1000u32).map(|n| b'a' + (n % 26) as u8).collect();
        let got = lines(&long, 10).await;
        let Line::TooLong(tail) = got[0].0 else {
            panic!("{got:?}")
        };
        assert_eq!(tail.as_slice(), &long[long.len() - TAIL_BYTES..]);
    }

    #[test]
    fn a_byte_rate_allows_its_burst_then_its_rate() {
        let start = std::time::Instant::now();
        let mut rate = ByteRate::new(1000, 5000);
        assert!((0..5).all(|_| rate.take(1000, start)), "the burst");
        assert!(!rate.take(1000, start), "past the burst");
        let later = start + std::time::Duration::from_secs(2);
        assert!(rate.take(2000, later), "two seconds refill 2000");
        assert!(!rate.take(1, later));
        let much_later = start + std::time::Duration::from_secs(3600);
        assert!(
            rate.take(5000, much_later) && !rate.take(1, much_later),
            "capped at the burst"
        );
    }

    #[test]
    fn event_sizes_are_counted_between_blank_lines_across_chunks() {
        let mut check = EventSizeCheck::default();
        assert!(check.feed(b"data: 12345\n", 20));
        assert!(check.feed(b"\n", 20), "a boundary resets the count");
        assert!(check.feed(b"data: 0123456789\n", 20));
        assert!(!check.feed(b"data: more\n", 20), "one event past 20 bytes");
        let mut crlf = EventSizeCheck::default();
        assert!(crlf.feed(b"data: 0123456789\r\n\r", 20));
        assert!(crlf.feed(b"\ndata: 0123456789\r\n", 20));
        assert!(crlf.feed(b"\r\n", 20));
    }
}
