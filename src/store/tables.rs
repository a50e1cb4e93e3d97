//! The one table interface the store's files are written against, whichever
//! engine holds the bytes: redb's typed tables (the embedded store, its
//! file format unchanged) or, with the `postgres` feature, the shared
//! key-value relation of `postgres/` (keys encoded so that byte order is
//! redb's order). A transaction is a `Reader` or a `Writer` over either.
//!
//! What stays on redb alone: the embedding cache (derived data, each
//! replica's own), the open's migrations and `store recover`.

use std::marker::PhantomData;
use std::ops::Bound;

use redb::{ReadableTable, ReadableTableMetadata as _, TableDefinition};

use super::StoreError;

/// A key or value type of a table: its redb type (the file format of the
/// embedded store) and its encoding as bytes, in the same order.
pub(super) trait Field: Sized + 'static {
    type Redb: redb::Key + 'static;
    fn to_redb(&self) -> <Self::Redb as redb::Value>::SelfType<'_>;
    fn from_redb(value: <Self::Redb as redb::Value>::SelfType<'_>) -> Self;
    /// Bytes whose order (`memcmp`) is the order of the values.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    fn to_bytes(&self) -> Vec<u8>;
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError>;
}

fn fixed<const N: usize>(bytes: &[u8]) -> Result<[u8; N], StoreError> {
    bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("a key of {} bytes, not {N}", bytes.len())))
}

fn text(bytes: &[u8]) -> Result<String, StoreError> {
    String::from_utf8(bytes.to_vec()).map_err(|err| StoreError::Corrupt(err.to_string()))
}

/// Numbers: big-endian bytes sort as the numbers do.
macro_rules! number_field {
    ($($ty:ty),*) => {$(
        impl Field for $ty {
            type Redb = $ty;
            fn to_redb(&self) -> $ty {
                *self
            }
            fn from_redb(value: $ty) -> Self {
                value
            }
            fn to_bytes(&self) -> Vec<u8> {
                self.to_be_bytes().to_vec()
            }
            fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
                Ok(<$ty>::from_be_bytes(fixed(bytes)?))
            }
        }
    )*};
}
number_field!(u64, u128);

impl Field for String {
    type Redb = &'static str;
    fn to_redb(&self) -> &str {
        self
    }
    fn from_redb(value: &str) -> Self {
        value.to_owned()
    }
    fn to_bytes(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        text(bytes)
    }
}

impl Field for Vec<u8> {
    type Redb = &'static [u8];
    fn to_redb(&self) -> &[u8] {
        self
    }
    fn from_redb(value: &[u8]) -> Self {
        value.to_vec()
    }
    fn to_bytes(&self) -> Vec<u8> {
        self.clone()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        Ok(bytes.to_vec())
    }
}

impl Field for [u8; 32] {
    type Redb = &'static [u8; 32];
    fn to_redb(&self) -> &[u8; 32] {
        self
    }
    fn from_redb(value: &[u8; 32]) -> Self {
        *value
    }
    fn to_bytes(&self) -> Vec<u8> {
        self.to_vec()
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        fixed(bytes)
    }
}

/// A server's entry: the id's fixed 16 bytes first, so ids order before
/// names as in redb's tuples.
impl Field for (u128, String) {
    type Redb = (u128, &'static str);
    fn to_redb(&self) -> (u128, &str) {
        (self.0, &self.1)
    }
    fn from_redb((id, name): (u128, &str)) -> Self {
        (id, name.to_owned())
    }
    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = self.0.to_be_bytes().to_vec();
        bytes.extend_from_slice(self.1.as_bytes());
        bytes
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        let (id, name) = bytes.split_at_checked(16).ok_or_else(|| {
            StoreError::Corrupt(format!("a key of {} bytes, under 16", bytes.len()))
        })?;
        Ok((u128::from_be_bytes(fixed(id)?), text(name)?))
    }
}

impl Field for (u128, u64) {
    type Redb = (u128, u64);
    fn to_redb(&self) -> (u128, u64) {
        *self
    }
    fn from_redb(value: (u128, u64)) -> Self {
        value
    }
    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = self.0.to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.1.to_be_bytes());
        bytes
    }
    fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        let (id, n) = bytes.split_at_checked(16).ok_or_else(|| {
            StoreError::Corrupt(format!("a key of {} bytes, under 16", bytes.len()))
        })?;
        Ok((
            u128::from_be_bytes(fixed(id)?),
            u64::from_be_bytes(fixed(n)?),
        ))
    }
}

/// A table: its name, key type and value type.
pub(super) struct Table<K, V> {
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for Table<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for Table<K, V> {}

impl<K: Field, V: Field> Table<K, V> {
    pub(super) const fn new(name: &'static str) -> Table<K, V> {
        Table {
            name,
            types: PhantomData,
        }
    }

    /// The same table as redb names it (the files not yet on this
    /// interface, recovery, and the open's checks use it).
    pub(super) const fn redb(&self) -> TableDefinition<'static, K::Redb, V::Redb> {
        TableDefinition::new(self.name)
    }
}

/// The key of a server's tool, resource, template, prompt or pin.
pub(super) type ItemKey = (u128, String);

/// The keys of one server's entries in a table keyed by (server, name).
pub(super) fn server_range(key: u128) -> (Bound<ItemKey>, Bound<ItemKey>) {
    let to = match key.checked_add(1) {
        Some(next) => Bound::Excluded((next, String::new())),
        None => Bound::Unbounded,
    };
    (Bound::Included((key, String::new())), to)
}

/// Entries in key order, or the other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    Ascending,
    Descending,
}

/// A read transaction: every read sees one snapshot.
pub(super) enum Reader<'t> {
    Redb(&'t redb::ReadTransaction),
    #[cfg(feature = "postgres")]
    Pg(&'t std::cell::RefCell<super::postgres::PgTxn>),
}

/// The write transaction (one at a time): its reads see its own writes.
pub(super) enum Writer<'t> {
    Redb(&'t redb::WriteTransaction),
    #[cfg(feature = "postgres")]
    Pg(&'t std::cell::RefCell<super::postgres::PgTxn>),
}

/// The reads both transactions offer (a `Writer`'s see its own writes),
/// so a rule that only reads is written once for both.
pub(super) trait Reads {
    fn get<K: Field, V: Field>(&self, table: Table<K, V>, key: &K)
    -> Result<Option<V>, StoreError>;

    /// Calls `each` with the entries between the bounds in `order` until
    /// it returns `false`. `each` may use other tables, never the one it
    /// walks (redb holds it open meanwhile: any use of it is an error).
    fn for_each<K: Field, V: Field>(
        &self,
        table: Table<K, V>,
        from: Bound<&K>,
        to: Bound<&K>,
        order: Order,
        each: impl FnMut(K, V) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError>;

    fn len<K: Field, V: Field>(&self, table: Table<K, V>) -> Result<u64, StoreError>;

    /// The first entry between the bounds in `order`.
    fn first<K: Field, V: Field>(
        &self,
        table: Table<K, V>,
        from: Bound<&K>,
        to: Bound<&K>,
        order: Order,
    ) -> Result<Option<(K, V)>, StoreError>;

    /// Every entry between the bounds, in `order`.
    fn entries<K: Field, V: Field>(
        &self,
        table: Table<K, V>,
        from: Bound<&K>,
        to: Bound<&K>,
        order: Order,
    ) -> Result<Vec<(K, V)>, StoreError> {
        let mut out = Vec::new();
        self.for_each(table, from, to, order, |key, value| {
            out.push((key, value));
            Ok(true)
        })?;
        Ok(out)
    }
}

/// One body for both transactions: redb's two table kinds answer the
/// same calls.
macro_rules! reads {
    () => {
        fn get<K: Field, V: Field>(
            &self,
            table: Table<K, V>,
            key: &K,
        ) -> Result<Option<V>, StoreError> {
            match self {
                Self::Redb(txn) => match txn.open_table(table.redb()) {
                    Ok(opened) => redb_get(&opened, key),
                    Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
                    Err(err) => Err(err.into()),
                },
                #[cfg(feature = "postgres")]
                Self::Pg(txn) => txn
                    .borrow_mut()
                    .get(table.name, &key.to_bytes())?
                    .map(|bytes| V::from_bytes(&bytes))
                    .transpose(),
            }
        }

        fn for_each<K: Field, V: Field>(
            &self,
            table: Table<K, V>,
            from: Bound<&K>,
            to: Bound<&K>,
            order: Order,
            mut each: impl FnMut(K, V) -> Result<bool, StoreError>,
        ) -> Result<(), StoreError> {
            match self {
                Self::Redb(txn) => match txn.open_table(table.redb()) {
                    Ok(opened) => redb_for_each(&opened, from, to, order, &mut each),
                    Err(redb::TableError::TableDoesNotExist(_)) => Ok(()),
                    Err(err) => Err(err.into()),
                },
                #[cfg(feature = "postgres")]
                Self::Pg(txn) => pg_for_each(txn, table.name, from, to, order, &mut each),
            }
        }

        fn first<K: Field, V: Field>(
            &self,
            table: Table<K, V>,
            from: Bound<&K>,
            to: Bound<&K>,
            order: Order,
        ) -> Result<Option<(K, V)>, StoreError> {
            match self {
                Self::Redb(_) => {
                    let mut first = None;
                    self.for_each(table, from, to, order, |key, value| {
                        first = Some((key, value));
                        Ok(false)
                    })?;
                    Ok(first)
                }
                // One row asked for, not a page.
                #[cfg(feature = "postgres")]
                Self::Pg(txn) => {
                    let (from, to) = (bound_bytes(from), bound_bytes(to));
                    let row = txn
                        .borrow_mut()
                        .range(
                            table.name,
                            as_slices(&from),
                            as_slices(&to),
                            pg_order(order),
                            Some(1),
                        )?
                        .into_iter()
                        .next();
                    row.map(|(key, value)| Ok((K::from_bytes(&key)?, V::from_bytes(&value)?)))
                        .transpose()
                }
            }
        }

        fn len<K: Field, V: Field>(&self, table: Table<K, V>) -> Result<u64, StoreError> {
            match self {
                Self::Redb(txn) => match txn.open_table(table.redb()) {
                    Ok(opened) => Ok(opened.len()?),
                    Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
                    Err(err) => Err(err.into()),
                },
                #[cfg(feature = "postgres")]
                Self::Pg(txn) => Ok(txn.borrow_mut().len(table.name)?),
            }
        }
    };
}

impl Reads for Reader<'_> {
    reads!();
}

impl Reads for Writer<'_> {
    reads!();
}

impl Writer<'_> {
    /// Sets `key`; the value it had.
    pub(super) fn insert<K: Field, V: Field>(
        &self,
        table: Table<K, V>,
        key: &K,
        value: &V,
    ) -> Result<Option<V>, StoreError> {
        match self {
            Writer::Redb(txn) => {
                let mut opened = txn.open_table(table.redb())?;
                let old = opened.insert(key.to_redb(), value.to_redb())?;
                Ok(old.map(|guard| V::from_redb(guard.value())))
            }
            #[cfg(feature = "postgres")]
            Writer::Pg(txn) => txn
                .borrow_mut()
                .insert(table.name, &key.to_bytes(), &value.to_bytes())?
                .map(|bytes| V::from_bytes(&bytes))
                .transpose(),
        }
    }

    /// Inserts (or replaces) every entry, without reading what they
    /// replace: on PostgreSQL one statement for them all.
    pub(super) fn insert_all<K: Field, V: Field>(
        &self,
        table: Table<K, V>,
        entries: &[(K, V)],
    ) -> Result<(), StoreError> {
        match self {
            Writer::Redb(txn) => {
                let mut opened = txn.open_table(table.redb())?;
                for (key, value) in entries {
                    opened.insert(key.to_redb(), value.to_redb())?;
                }
                Ok(())
            }
            #[cfg(feature = "postgres")]
            Writer::Pg(txn) => {
                let encoded: Vec<(Vec<u8>, Vec<u8>)> = entries
                    .iter()
                    .map(|(key, value)| (key.to_bytes(), value.to_bytes()))
                    .collect();
                Ok(txn.borrow_mut().insert_all(table.name, &encoded)?)
            }
        }
    }

    /// Removes `key`; the value it had.
    pub(super) fn remove<K: Field, V: Field>(
        &self,
        table: Table<K, V>,
        key: &K,
    ) -> Result<Option<V>, StoreError> {
        match self {
            Writer::Redb(txn) => {
                let mut opened = txn.open_table(table.redb())?;
                let old = opened.remove(key.to_redb())?;
                Ok(old.map(|guard| V::from_redb(guard.value())))
            }
            #[cfg(feature = "postgres")]
            Writer::Pg(txn) => txn
                .borrow_mut()
                .remove(table.name, &key.to_bytes())?
                .map(|bytes| V::from_bytes(&bytes))
                .transpose(),
        }
    }

    /// Removes the first entry; it and its key.
    pub(super) fn pop_first<K: Field, V: Field>(
        &self,
        table: Table<K, V>,
    ) -> Result<Option<(K, V)>, StoreError> {
        let first = self.first(table, Bound::Unbounded, Bound::Unbounded, Order::Ascending)?;
        if let Some((key, _)) = &first {
            self.remove(table, key)?;
        }
        Ok(first)
    }

    /// Removes every entry between the bounds.
    pub(super) fn remove_range<K: Field, V: Field>(
        &self,
        table: Table<K, V>,
        from: Bound<&K>,
        to: Bound<&K>,
    ) -> Result<(), StoreError> {
        match self {
            Writer::Redb(txn) => {
                let mut opened = txn.open_table(table.redb())?;
                let from = from.map(Field::to_redb);
                let to = to.map(Field::to_redb);
                opened.retain_in::<<K::Redb as redb::Value>::SelfType<'_>, _>(
                    (from, to),
                    |_, _| false,
                )?;
                Ok(())
            }
            #[cfg(feature = "postgres")]
            Writer::Pg(txn) => {
                let (from, to) = (bound_bytes(from), bound_bytes(to));
                txn.borrow_mut()
                    .remove_range(table.name, as_slices(&from), as_slices(&to))?;
                Ok(())
            }
        }
    }
}

fn redb_get<K: Field, V: Field>(
    table: &impl ReadableTable<K::Redb, V::Redb>,
    key: &K,
) -> Result<Option<V>, StoreError> {
    Ok(table
        .get(key.to_redb())?
        .map(|guard| V::from_redb(guard.value())))
}

fn redb_for_each<K: Field, V: Field>(
    table: &impl ReadableTable<K::Redb, V::Redb>,
    from: Bound<&K>,
    to: Bound<&K>,
    order: Order,
    each: &mut impl FnMut(K, V) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let from = from.map(Field::to_redb);
    let to = to.map(Field::to_redb);
    let range = table.range::<<K::Redb as redb::Value>::SelfType<'_>>((from, to))?;
    let entries: Box<dyn Iterator<Item = _>> = match order {
        Order::Ascending => Box::new(range),
        Order::Descending => Box::new(range.rev()),
    };
    for entry in entries {
        let (key, value) = entry?;
        if !each(K::from_redb(key.value()), V::from_redb(value.value()))? {
            break;
        }
    }
    Ok(())
}

/// Rows fetched per round trip while walking a range on PostgreSQL: a
/// walk that stops early (the newest audit entries) reads one page, a
/// whole table never sits in memory at once.
#[cfg(feature = "postgres")]
const PG_PAGE: usize = 512;

#[cfg(feature = "postgres")]
fn pg_for_each<K: Field, V: Field>(
    txn: &std::cell::RefCell<super::postgres::PgTxn>,
    table: &str,
    from: Bound<&K>,
    to: Bound<&K>,
    order: Order,
    each: &mut impl FnMut(K, V) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let (mut from, mut to) = (bound_bytes(from), bound_bytes(to));
    loop {
        let page = txn.borrow_mut().range(
            table,
            as_slices(&from),
            as_slices(&to),
            pg_order(order),
            Some(PG_PAGE),
        )?;
        let full = page.len() == PG_PAGE;
        let mut last = None;
        for (key, value) in page {
            if !each(K::from_bytes(&key)?, V::from_bytes(&value)?)? {
                return Ok(());
            }
            last = Some(key);
        }
        match (full, last) {
            (true, Some(last)) => match order {
                Order::Ascending => from = Bound::Excluded(last),
                Order::Descending => to = Bound::Excluded(last),
            },
            _ => return Ok(()),
        }
    }
}

#[cfg(feature = "postgres")]
fn bound_bytes<K: Field>(bound: Bound<&K>) -> Bound<Vec<u8>> {
    bound.map(Field::to_bytes)
}

#[cfg(feature = "postgres")]
fn as_slices(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}

#[cfg(feature = "postgres")]
fn pg_order(order: Order) -> super::postgres::Order {
    match order {
        Order::Ascending => super::postgres::Order::Ascending,
        Order::Descending => super::postgres::Order::Descending,
    }
}

impl super::Store {
    /// Runs `work` in a read transaction of the store's engine.
    pub(super) fn read<T>(
        &self,
        work: impl FnOnce(&Reader<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        #[cfg(feature = "postgres")]
        if let Some(shared) = &self.shared {
            let txn = std::cell::RefCell::new(shared.begin_read()?);
            let out = work(&Reader::Pg(&txn))?;
            txn.into_inner().commit()?;
            return Ok(out);
        }
        self.read_file(work)
    }

    /// `read` on the file whatever holds the shared tables: what this
    /// process keeps for itself.
    pub(super) fn read_file<T>(
        &self,
        work: impl FnOnce(&Reader<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let db = self.db()?;
        let txn = redb::ReadableDatabase::begin_read(db.as_ref())?;
        work(&Reader::Redb(&txn))
    }

    /// `write` on the file whatever holds the shared tables.
    pub(super) fn write_file<T>(
        &self,
        work: impl FnOnce(&Writer<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let db = self.db_for_write()?;
        let txn = db.begin_write()?;
        let out = work(&Writer::Redb(&txn))?;
        txn.commit()?;
        Ok(out)
    }

    /// The tables shared with other replicas, if they are: their
    /// announcements and heartbeats.
    #[cfg(feature = "postgres")]
    pub fn shared(&self) -> Option<&super::postgres::PgTables> {
        self.shared.as_ref()
    }

    /// Whether the tables are shared with other replicas.
    pub(super) fn is_shared(&self) -> bool {
        #[cfg(feature = "postgres")]
        return self.shared.is_some();
        #[cfg(not(feature = "postgres"))]
        false
    }

    /// Runs `work` in the write transaction and commits what it wrote if
    /// it succeeds; an error leaves the store as it was.
    pub(super) fn write<T>(
        &self,
        work: impl FnOnce(&Writer<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        #[cfg(feature = "postgres")]
        if let Some(shared) = &self.shared {
            let txn = std::cell::RefCell::new(shared.begin_write()?);
            let out = work(&Writer::Pg(&txn))?;
            txn.into_inner().commit()?;
            return Ok(out);
        }
        self.write_file(work)
    }
}
