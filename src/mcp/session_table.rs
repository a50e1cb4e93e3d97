//! The table of `/mcp` sessions, bounded three ways: sessions idle longer
//! than the idle timeout expire; one client — the named token it came
//! with, else its remote address — holds at most `max_per_client`; the
//! whole table holds at most `max_sessions`. Room is
//! made by evicting an idle session (no request running, no open stream) —
//! at the per-client cap one of that client's own, at the total cap one of
//! the address that holds the most — never one in use, so one client
//! opening sessions in a loop cannot push out everyone else's work.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default idle expiry of an `/mcp` session.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default cap on all sessions.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// Default cap on one remote address's sessions.
pub const DEFAULT_MAX_PER_CLIENT: usize = 1_000;

/// Who a session counts against: the named token its client came with
/// (every local client shares one address), else its remote address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientKey(String);

impl ClientKey {
    pub fn token(name: &str) -> ClientKey {
        ClientKey(format!("token {name}"))
    }
}

impl From<IpAddr> for ClientKey {
    fn from(address: IpAddr) -> ClientKey {
        ClientKey(format!("address {address}"))
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The bounds of the table.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    pub idle_timeout: Duration,
    pub max_sessions: usize,
    pub max_per_client: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_per_client: DEFAULT_MAX_PER_CLIENT,
        }
    }
}

/// Why a session could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableFull {
    #[error("this client already has {0} MCP sessions, all in use; close one (DELETE /mcp) first")]
    Client(usize),
    #[error("the aggregator holds {0} MCP sessions, all in use; try again later")]
    Total(usize),
}

/// Activity of one session, shared with the guards that mark it in use.
#[derive(Debug)]
struct Activity {
    in_use: AtomicUsize,
    /// Milliseconds since the table's epoch.
    last_used: AtomicU64,
}

/// Marks a session in use while it lives (a request running, a stream
/// open); its drop counts as the session's last use.
#[derive(Debug)]
pub struct InUse {
    activity: Arc<Activity>,
    epoch: Instant,
}

impl Drop for InUse {
    fn drop(&mut self) {
        self.activity
            .last_used
            .store(millis_since(self.epoch, Instant::now()), Ordering::Relaxed);
        self.activity.in_use.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Entry<T> {
    value: Arc<T>,
    remote: ClientKey,
    activity: Arc<Activity>,
}

impl<T> Entry<T> {
    fn is_idle(&self) -> bool {
        self.activity.in_use.load(Ordering::Relaxed) == 0
    }

    fn last_used(&self) -> u64 {
        self.activity.last_used.load(Ordering::Relaxed)
    }
}

/// Sessions by id.
pub struct SessionTable<T> {
    entries: Mutex<HashMap<String, Entry<T>>>,
    limits: SessionLimits,
    epoch: Instant,
    /// The replica whose sessions these are (several share a store): its
    /// id starts each session's, `REPLICA.uuid`.
    replica: Option<String>,
}

impl<T> SessionTable<T> {
    pub fn new(limits: SessionLimits) -> SessionTable<T> {
        SessionTable {
            entries: Mutex::new(HashMap::new()),
            limits,
            epoch: Instant::now(),
            replica: None,
        }
    }

    /// Sessions of the replica `id`: their ids say so.
    pub fn of_replica(mut self, id: &str) -> SessionTable<T> {
        self.replica = Some(id.to_owned());
        self
    }

    /// Why `id` is not here when it is another replica's session (its
    /// requests reached the wrong replica); `None` otherwise.
    pub fn elsewhere(&self, id: &str) -> Option<String> {
        let mine = self.replica.as_deref()?;
        let (owner, _) = id.rsplit_once('.')?;
        (owner != mine).then(|| {
            format!(
                "unknown MCP session here: it was created by replica {owner}, this is {mine}. A load balancer must send every request of a 2025 session to the replica that created it (route on the Mcp-Session-Id header); or initialize again to start a session here"
            )
        })
    }

    pub fn limits(&self) -> SessionLimits {
        self.limits
    }

    /// Adds a session for `remote` under a fresh id, evicting an idle one
    /// when a cap is reached; returns the id and the session marked in use.
    pub fn insert(
        &self,
        remote: impl Into<ClientKey>,
        value: Arc<T>,
    ) -> Result<(String, InUse), TableFull> {
        let remote = remote.into();
        let Ok(mut entries) = self.entries.lock() else {
            return Err(TableFull::Total(0));
        };
        let of_client = entries.values().filter(|e| e.remote == remote).count();
        if of_client >= self.limits.max_per_client {
            let victim = lru_idle(entries.iter().filter(|(_, e)| e.remote == remote));
            match victim {
                Some(id) => {
                    entries.remove(&id);
                    tracing::info!(%remote, "MCP session cap per client reached; its least recently used idle session was closed");
                }
                None => return Err(TableFull::Client(of_client)),
            }
        }
        if entries.len() >= self.limits.max_sessions {
            let mut counts: HashMap<&ClientKey, usize> = HashMap::new();
            for entry in entries.values() {
                *counts.entry(&entry.remote).or_default() += 1;
            }
            // The client holding the most sessions gives one up.
            let mut hogs: Vec<(ClientKey, usize)> = counts
                .into_iter()
                .map(|(client, count)| (client.clone(), count))
                .collect();
            hogs.sort_by_key(|hog| std::cmp::Reverse(hog.1));
            let victim = hogs
                .iter()
                .find_map(|(hog, _)| lru_idle(entries.iter().filter(|(_, e)| e.remote == *hog)));
            match victim {
                Some(id) => {
                    entries.remove(&id);
                    tracing::warn!(
                        max = self.limits.max_sessions,
                        "MCP session cap reached; an idle session of the busiest client was closed"
                    );
                }
                None => return Err(TableFull::Total(entries.len())),
            }
        }
        let fresh = uuid::Uuid::new_v4().simple();
        let id = match &self.replica {
            Some(replica) => format!("{replica}.{fresh}"),
            None => fresh.to_string(),
        };
        let activity = Arc::new(Activity {
            in_use: AtomicUsize::new(0),
            last_used: AtomicU64::new(millis_since(self.epoch, Instant::now())),
        });
        let in_use = self.mark(&activity);
        entries.insert(
            id.clone(),
            Entry {
                value,
                remote,
                activity,
            },
        );
        Ok((id, in_use))
    }

    /// The session with this id, marked in use.
    pub fn get(&self, id: &str) -> Option<(Arc<T>, InUse)> {
        let entries = self.entries.lock().ok()?;
        let entry = entries.get(id)?;
        Some((Arc::clone(&entry.value), self.mark(&entry.activity)))
    }

    /// Ends a session; false if it was unknown.
    pub fn remove(&self, id: &str) -> bool {
        self.entries
            .lock()
            .map(|mut e| e.remove(id).is_some())
            .unwrap_or(false)
    }

    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes the sessions idle for longer than the idle timeout at `now`;
    /// returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let Ok(mut entries) = self.entries.lock() else {
            return 0;
        };
        let timeout = u64::try_from(self.limits.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let now = millis_since(self.epoch, now);
        let before = entries.len();
        entries.retain(|_, e| !e.is_idle() || now.saturating_sub(e.last_used()) < timeout);
        before - entries.len()
    }

    fn mark(&self, activity: &Arc<Activity>) -> InUse {
        activity.in_use.fetch_add(1, Ordering::Relaxed);
        activity
            .last_used
            .store(millis_since(self.epoch, Instant::now()), Ordering::Relaxed);
        InUse {
            activity: Arc::clone(activity),
            epoch: self.epoch,
        }
    }
}

fn lru_idle<'a, T: 'a>(
    entries: impl Iterator<Item = (&'a String, &'a Entry<T>)>,
) -> Option<String> {
    entries
        .filter(|(_, e)| e.is_idle())
        .min_by_key(|(_, e)| e.last_used())
        .map(|(id, _)| id.clone())
}

fn millis_since(epoch: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn table(max_sessions: usize, max_per_client: usize) -> SessionTable<u32> {
        SessionTable::new(SessionLimits {
            idle_timeout: Duration::from_secs(60),
            max_sessions,
            max_per_client,
        })
    }

    #[test]
    fn each_token_is_a_client_of_its_own_on_one_address() {
        let table = table(100, 2);
        let (mine, _) = table
            .insert(ClientKey::token("owner"), Arc::new(1))
            .unwrap();
        // Another token on the same address fills its own share (its own
        // idle sessions make room) and never touches the owner's.
        for n in 0..10 {
            table
                .insert(ClientKey::token("flood"), Arc::new(n))
                .unwrap();
        }
        assert!(
            table.get(&mine).is_some(),
            "the owner's session was evicted"
        );
        // Without tokens, the address is the client.
        table.insert(ip(9), Arc::new(0)).unwrap();
        table.insert(ip(9), Arc::new(0)).unwrap();
        assert!(table.get(&mine).is_some());
    }

    #[test]
    fn a_replicas_session_ids_name_it_and_another_replicas_are_told_apart() {
        let r1 = table(10, 10).of_replica("edge-1.lan:8765");
        let r2 = table(10, 10).of_replica("edge-2");
        let (id, _in_use) = r1.insert(ip(1), Arc::new(1)).unwrap();
        assert!(id.starts_with("edge-1.lan:8765."), "{id}");
        assert!(r1.elsewhere(&id).is_none(), "its own");
        let told = r2.elsewhere(&id).expect("another replica's session");
        assert!(
            told.contains("replica edge-1.lan:8765") && told.contains("this is edge-2"),
            "{told}"
        );
        let (plain, _in_use) = table(10, 10).insert(ip(1), Arc::new(1)).unwrap();
        assert_eq!(plain.len(), 32, "one daemon: a bare uuid");
        assert!(
            r2.elsewhere(&plain).is_none(),
            "not a replica's: just unknown"
        );
    }

    #[test]
    fn sessions_in_use_are_never_evicted_and_idle_ones_are() {
        let table = table(2, 10);
        let (a, a_use) = table.insert(ip(1), Arc::new(1)).unwrap();
        let (b, b_use) = table.insert(ip(2), Arc::new(2)).unwrap();
        assert_eq!(
            table.insert(ip(3), Arc::new(3)).unwrap_err(),
            TableFull::Total(2),
            "both in use: nobody is pushed out"
        );
        drop(a_use);
        let (c, _c_use) = table.insert(ip(3), Arc::new(3)).unwrap();
        assert!(table.get(&a).is_none(), "the idle one made room");
        assert!(table.get(&b).is_some() && table.get(&c).is_some());
        drop(b_use);
    }

    #[test]
    fn the_busiest_client_gives_up_a_session_at_the_total_cap() {
        let table = table(4, 10);
        let (victim_owner, _) = table.insert(ip(1), Arc::new(1)).unwrap();
        let hog: Vec<String> = (0..3)
            .map(|n| table.insert(ip(9), Arc::new(n)).unwrap().0)
            .collect();
        let (_, _new) = table.insert(ip(9), Arc::new(99)).unwrap();
        assert!(
            table.get(&victim_owner).is_some(),
            "the quiet client keeps its session"
        );
        assert_eq!(
            hog.iter().filter(|id| table.get(id).is_none()).count(),
            1,
            "one of the hog's own sessions went"
        );
    }

    #[test]
    fn the_per_client_cap_evicts_that_clients_own_idle_sessions() {
        let table = table(100, 2);
        let (other, _) = table.insert(ip(2), Arc::new(0)).unwrap();
        let (first, _) = table.insert(ip(1), Arc::new(1)).unwrap();
        let (_second, second_use) = table.insert(ip(1), Arc::new(2)).unwrap();
        let (_third, third_use) = table.insert(ip(1), Arc::new(3)).unwrap();
        assert!(table.get(&first).is_none());
        assert!(table.get(&other).is_some());
        assert_eq!(
            table.insert(ip(1), Arc::new(4)).unwrap_err(),
            TableFull::Client(2)
        );
        drop((second_use, third_use));
    }

    #[test]
    fn idle_sessions_expire_and_busy_ones_do_not() {
        let table = table(100, 100);
        let (idle, _) = table.insert(ip(1), Arc::new(1)).unwrap();
        let (busy, busy_use) = table.insert(ip(1), Arc::new(2)).unwrap();
        let later = Instant::now() + Duration::from_secs(61);
        assert_eq!(table.expire(later), 1);
        assert!(table.get(&idle).is_none());
        assert!(table.get(&busy).is_some());
        drop(busy_use);
        assert_eq!(table.expire(Instant::now()), 0, "just used");
        assert_eq!(table.expire(later + Duration::from_secs(61)), 1);
        assert!(table.is_empty());
    }
}
