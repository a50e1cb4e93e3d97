//! The resource cache: `resources/read` results by namespaced
//! URI, bounded three ways — entry count (least recently used goes first),
//! total bytes, and age (TTL) — with hit, miss and eviction counts. An entry
//! is dropped when its server says the resource was updated or its resource
//! list changed.

use serde::Serialize;
use serde_json::Value;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use utoipa::ToSchema;

use crate::model::ServerId;

/// Cache limits.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    pub max_entries: usize,
    pub max_bytes: usize,
    /// Results larger than this are not cached.
    pub max_entry_bytes: usize,
    pub ttl: Duration,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            max_entries: 1024,
            max_bytes: 64 * 1024 * 1024,
            max_entry_bytes: 4 * 1024 * 1024,
            ttl: Duration::from_secs(60),
        }
    }
}

struct Entry {
    server_id: ServerId,
    value: Value,
    bytes: usize,
    stored: Instant,
}

/// What the cache holds and how it has done.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: usize,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub expirations: u64,
    pub invalidations: u64,
}

pub struct ResourceCache {
    settings: CacheSettings,
    inner: Mutex<(lru::LruCache<String, Entry>, usize)>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    expirations: AtomicU64,
    invalidations: AtomicU64,
}

impl ResourceCache {
    pub fn new(settings: CacheSettings) -> ResourceCache {
        let capacity = NonZeroUsize::new(settings.max_entries.max(1)).unwrap_or(NonZeroUsize::MIN);
        ResourceCache {
            settings,
            inner: Mutex::new((lru::LruCache::new(capacity), 0)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            expirations: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
        }
    }

    /// A fresh cached result, if any (counts a hit or a miss).
    pub fn get(&self, uri: &str) -> Option<Value> {
        let Ok(mut guard) = self.inner.lock() else {
            return None;
        };
        let (lru, bytes) = &mut *guard;
        let expired = match lru.get(uri) {
            Some(entry) if entry.stored.elapsed() < self.settings.ttl => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Some(entry.value.clone());
            }
            Some(_) => true,
            None => false,
        };
        if expired && let Some(entry) = lru.pop(uri) {
            *bytes -= entry.bytes;
            self.expirations.fetch_add(1, Ordering::Relaxed);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Stores a result, evicting the least recently used entries as needed.
    pub fn put(&self, uri: &str, server_id: ServerId, value: &Value) {
        let size = serde_json::to_vec(value)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > self.settings.max_entry_bytes || size > self.settings.max_bytes {
            return;
        }
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        let (lru, bytes) = &mut *guard;
        if let Some(old) = lru.pop(uri) {
            *bytes -= old.bytes;
        }
        while *bytes + size > self.settings.max_bytes {
            match lru.pop_lru() {
                Some((_, old)) => {
                    *bytes -= old.bytes;
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
        let entry = Entry {
            server_id,
            value: value.clone(),
            bytes: size,
            stored: Instant::now(),
        };
        if let Some((_, old)) = lru.push(uri.to_owned(), entry) {
            *bytes -= old.bytes;
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
        *bytes += size;
    }

    /// Drops one URI (the server said it changed).
    pub fn invalidate(&self, uri: &str) {
        if let Ok(mut guard) = self.inner.lock() {
            let (lru, bytes) = &mut *guard;
            if let Some(entry) = lru.pop(uri) {
                *bytes -= entry.bytes;
                self.invalidations.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops everything of one server (its list changed, it went away).
    pub fn invalidate_server(&self, server_id: ServerId) {
        if let Ok(mut guard) = self.inner.lock() {
            let (lru, bytes) = &mut *guard;
            let doomed: Vec<String> = lru
                .iter()
                .filter(|(_, e)| e.server_id == server_id)
                .map(|(k, _)| k.clone())
                .collect();
            for uri in doomed {
                if let Some(entry) = lru.pop(&uri) {
                    *bytes -= entry.bytes;
                    self.invalidations.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        let (entries, bytes) = self
            .inner
            .lock()
            .map(|g| (g.0.len(), g.1))
            .unwrap_or_default();
        CacheStats {
            entries,
            bytes,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            expirations: self.expirations.load(Ordering::Relaxed),
            invalidations: self.invalidations.load(Ordering::Relaxed),
        }
    }
}

/// The resource cache's key: a server and its own URI, whatever form the
/// client used.
pub(super) fn key(server_id: ServerId, uri: &str) -> String {
    format!("{server_id} {uri}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cache(max_entries: usize, max_bytes: usize, ttl: Duration) -> ResourceCache {
        ResourceCache::new(CacheSettings {
            max_entries,
            max_bytes,
            max_entry_bytes: max_bytes,
            ttl,
        })
    }

    #[test]
    fn hits_misses_and_lru_eviction_by_count() {
        let c = cache(2, 1 << 20, Duration::from_secs(60));
        let s = uuid::Uuid::new_v4();
        assert!(c.get("a").is_none());
        c.put("a", s, &json!({"contents": [1]}));
        c.put("b", s, &json!({"contents": [2]}));
        assert_eq!(c.get("a"), Some(json!({"contents": [1]})));
        c.put("c", s, &json!({"contents": [3]}));
        assert!(c.get("b").is_none(), "b was least recently used");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        let stats = c.stats();
        assert_eq!(
            (stats.entries, stats.hits, stats.misses, stats.evictions),
            (2, 3, 2, 1)
        );
    }

    #[test]
    fn byte_bound_ttl_and_invalidation() {
        let big = json!("x".repeat(100));
        let size = serde_json::to_vec(&big).unwrap().len();
        let c = cache(100, size * 2, Duration::from_secs(60));
        let (s1, s2) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        c.put("a", s1, &big);
        c.put("b", s1, &big);
        c.put("c", s2, &big);
        assert_eq!(c.stats().entries, 2, "the byte bound evicted one");
        assert!(c.stats().bytes <= size * 2);
        c.invalidate_server(s1);
        assert_eq!(c.stats().entries, 1);
        c.invalidate("c");
        assert_eq!(c.stats().entries, 0);
        c.put("huge", s1, &json!("y".repeat(size * 3)));
        assert_eq!(
            c.stats().entries,
            0,
            "entries over the bound are not cached"
        );

        let expiring = cache(10, 1 << 20, Duration::ZERO);
        expiring.put("a", s1, &big);
        assert!(expiring.get("a").is_none(), "a zero TTL never serves");
        assert_eq!(expiring.stats().expirations, 1);
    }
}
