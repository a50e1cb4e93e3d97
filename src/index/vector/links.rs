//! A saved `hnsw_rs` graph read back into flat arrays of links, and the
//! HNSW search over them. hnsw_rs's own reload rebuilds its in-memory
//! layout: per point sixteen layer lists and an `Arc` per link, about
//! 260 MB for 200,000 points (heaptrack) beside 150 MB of vectors. Its
//! dump holds the same graph as plain neighbour ids, so a restart reads
//! those into one `u32` per link (about 30 MB) and walks them here, the
//! vectors held apart (`saved_vectors`). hnsw_rs still builds and dumps
//! every graph.

use std::collections::BinaryHeap;
use std::io::{BufReader, Read};
use std::path::Path;

/// hnsw_rs's markers (`hnswio.rs`, dump format 4).
const POINT_MAGIC: u32 = 0x000a_678f;
const LAYER_MAGIC: u32 = 0x000a_676f;
/// hnsw_rs links a point to at most twice its connection count on layer
/// 0; anything beyond this is not a graph it wrote.
const MOST_LINKS: usize = 255;
/// No links above layer 0.
const NONE: u32 = u32::MAX;

#[derive(Debug, thiserror::Error)]
pub enum LinksError {
    #[error("cannot read the saved graph: {0}")]
    Io(#[from] std::io::Error),
    #[error("the saved graph is malformed: {0}")]
    Malformed(String),
}

fn malformed(what: impl Into<String>) -> LinksError {
    LinksError::Malformed(what.into())
}

/// Every point's neighbours, by data id.
#[derive(Debug, Default)]
pub struct Links {
    /// Layer 0: point `id` links to `bottom[start[id]..start[id] + count[id]]`.
    start: Vec<u32>,
    count: Vec<u8>,
    bottom: Vec<u32>,
    /// Layers 1 and up: point `id`'s block starts at `upper[upper_at[id]]`
    /// (`NONE` if it has no links there): the number of layers `k`, then
    /// each layer's link count, then the links of layers 1 to `k`. hnsw_rs
    /// gives most points a link or two on layers 1–3 whatever their own
    /// layer (and follows them), so this is per point, kept flat.
    upper_at: Vec<u32>,
    upper: Vec<u32>,
    entry: u32,
    /// The entry point's layer: the top of the graph.
    top: u8,
}

/// A distance that orders (hnsw_rs's are finite; a NaN sorts last).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Distance(f32);

impl Eq for Distance {}

impl PartialOrd for Distance {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Distance {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

struct Reader<R: Read> {
    input: R,
}

impl<R: Read> Reader<R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], LinksError> {
        let mut buffer = [0u8; N];
        self.input.read_exact(&mut buffer)?;
        Ok(buffer)
    }

    fn u8(&mut self) -> Result<u8, LinksError> {
        Ok(self.bytes::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, LinksError> {
        Ok(u32::from_ne_bytes(self.bytes()?))
    }

    fn i32(&mut self) -> Result<i32, LinksError> {
        Ok(i32::from_ne_bytes(self.bytes()?))
    }

    fn usize(&mut self) -> Result<usize, LinksError> {
        Ok(usize::from_ne_bytes(self.bytes()?))
    }

    /// A data id below `points`, as a `u32`.
    fn id(&mut self, points: usize) -> Result<u32, LinksError> {
        let id = self.usize()?;
        if id >= points {
            return Err(malformed(format!("point {id} where {points} were saved")));
        }
        u32::try_from(id).map_err(|_| malformed("a point id beyond u32"))
    }
}

impl Links {
    /// Reads hnsw_rs's graph file (`*.hnsw.graph`, dumped in full mode)
    /// of `points` points.
    pub fn read(path: &Path, points: usize) -> Result<Links, LinksError> {
        let file = std::fs::File::open(path)?;
        // Each link takes 17 bytes in the file (id, layer, rank, distance).
        let links_at_most = usize::try_from(file.metadata()?.len() / 17).unwrap_or(0);
        let mut input = BufReader::with_capacity(1 << 20, file);
        let description = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            hnsw_rs::hnswio::load_description(&mut input)
        }))
        .map_err(|_| malformed("hnsw_rs could not read its description"))?
        .map_err(|err| malformed(err.to_string()))?;
        if description.dumpmode != 1 {
            return Err(malformed("not dumped in full mode"));
        }
        if description.nb_point != points {
            return Err(malformed(format!(
                "{} points where {points} were saved",
                description.nb_point
            )));
        }
        let lists_per_point = usize::from(description.nb_layer);
        let mut reader = Reader { input };
        let mut links = Links {
            start: vec![u32::MAX; points],
            count: vec![0; points],
            bottom: Vec::with_capacity(links_at_most.min(points.saturating_mul(MOST_LINKS))),
            upper_at: vec![NONE; points],
            upper: Vec::new(),
            entry: 0,
            top: 0,
        };
        let layers = reader.u8()?;
        if usize::from(layers) > lists_per_point {
            return Err(malformed(format!("{layers} layers")));
        }
        let mut seen = 0usize;
        let mut neighbours = Vec::with_capacity(MOST_LINKS);
        // This point's links on layers 1 and up, before they are filed.
        let mut above: Vec<Vec<u32>> = vec![Vec::new(); lists_per_point.saturating_sub(1)];
        for layer in 0..layers {
            if reader.u32()? != LAYER_MAGIC {
                return Err(malformed("no layer marker"));
            }
            let on_layer = reader.usize()?;
            for _ in 0..on_layer {
                if reader.u32()? != POINT_MAGIC {
                    return Err(malformed("no point marker"));
                }
                let id = reader.id(points)?;
                let (its_layer, _rank) = (reader.u8()?, reader.i32()?);
                if its_layer != layer {
                    return Err(malformed("a point filed under another layer"));
                }
                if links.start[id as usize] != u32::MAX {
                    return Err(malformed(format!("point {id} saved twice")));
                }
                for list in 0..lists_per_point {
                    let count = reader.usize()?;
                    if count > MOST_LINKS {
                        return Err(malformed(format!("{count} links from one point")));
                    }
                    neighbours.clear();
                    for _ in 0..count {
                        neighbours.push(reader.id(points)?);
                        let (_layer, _rank, _distance) =
                            (reader.u8()?, reader.i32()?, reader.u32()?);
                    }
                    if list == 0 {
                        links.start[id as usize] = u32::try_from(links.bottom.len())
                            .map_err(|_| malformed("more links than u32 counts"))?;
                        links.count[id as usize] = count as u8;
                        links.bottom.extend_from_slice(&neighbours);
                    } else {
                        above[list - 1].clear();
                        above[list - 1].extend_from_slice(&neighbours);
                    }
                }
                links.file_upper(id, &above)?;
                seen += 1;
            }
        }
        if seen != points {
            return Err(malformed(format!(
                "{seen} points where {points} were saved"
            )));
        }
        if points > 0 {
            links.entry = reader.id(points)?;
            links.top = reader.u8()?;
            let _rank = reader.i32()?;
            if links.top >= layers {
                return Err(malformed("the entry point is above the top layer"));
            }
        }
        links.bottom.shrink_to_fit();
        links.upper.shrink_to_fit();
        Ok(links)
    }

    /// Files a point's links on layers 1 and up (`above[l - 1]` is layer
    /// `l`).
    fn file_upper(&mut self, id: u32, above: &[Vec<u32>]) -> Result<(), LinksError> {
        let layers = above
            .iter()
            .rposition(|l| !l.is_empty())
            .map_or(0, |last| last + 1);
        if layers == 0 {
            return Ok(());
        }
        self.upper_at[id as usize] =
            u32::try_from(self.upper.len()).map_err(|_| malformed("more links than u32 counts"))?;
        self.upper.push(layers as u32);
        self.upper
            .extend(above[..layers].iter().map(|l| l.len() as u32));
        for list in &above[..layers] {
            self.upper.extend_from_slice(list);
        }
        Ok(())
    }

    fn neighbours(&self, id: u32, layer: u8) -> &[u32] {
        if layer == 0 {
            let (start, count) = (self.start[id as usize], self.count[id as usize]);
            let start = start as usize;
            return self
                .bottom
                .get(start..start + usize::from(count))
                .unwrap_or(&[]);
        }
        let at = self.upper_at[id as usize];
        if at == NONE {
            return &[];
        }
        let at = at as usize;
        let layers = self.upper[at] as usize;
        let layer = usize::from(layer);
        if layer > layers {
            return &[];
        }
        let counts = &self.upper[at + 1..at + 1 + layers];
        let start = at
            + 1
            + layers
            + counts[..layer - 1]
                .iter()
                .map(|c| *c as usize)
                .sum::<usize>();
        self.upper
            .get(start..start + counts[layer - 1] as usize)
            .unwrap_or(&[])
    }

    /// The `wanted` points nearest by `distance` (to the query, from a
    /// point's id), nearest first, found with `width` candidates on the
    /// bottom layer: greedy down the upper layers from the entry point,
    /// then a beam search (HNSW, as hnsw_rs searches).
    pub fn nearest(
        &self,
        wanted: usize,
        width: usize,
        distance: impl Fn(u32) -> f32,
    ) -> Vec<(u32, f32)> {
        if self.start.is_empty() || wanted == 0 {
            return Vec::new();
        }
        let mut at = self.entry;
        let mut closest = Distance(distance(at));
        for layer in (1..=self.top).rev() {
            loop {
                let mut moved = false;
                for &next in self.neighbours(at, layer) {
                    let d = Distance(distance(next));
                    if d < closest {
                        (at, closest, moved) = (next, d, true);
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        let width = width.max(wanted);
        let mut visited = vec![0u64; self.start.len().div_ceil(64)];
        let mut visit = |id: u32| {
            let (word, bit) = (id as usize / 64, 1u64 << (id % 64));
            let fresh = visited[word] & bit == 0;
            visited[word] |= bit;
            fresh
        };
        visit(at);
        let mut candidates = BinaryHeap::new();
        let mut found = BinaryHeap::new();
        candidates.push(std::cmp::Reverse((closest, at)));
        found.push((closest, at));
        while let Some(std::cmp::Reverse((d, point))) = candidates.pop() {
            if found.len() >= width && found.peek().is_some_and(|(far, _)| d > *far) {
                break;
            }
            for &next in self.neighbours(point, 0) {
                if !visit(next) {
                    continue;
                }
                let d = Distance(distance(next));
                if found.len() < width || found.peek().is_some_and(|(far, _)| d < *far) {
                    candidates.push(std::cmp::Reverse((d, next)));
                    found.push((d, next));
                    if found.len() > width {
                        found.pop();
                    }
                }
            }
        }
        let mut found: Vec<(u32, f32)> = found
            .into_sorted_vec()
            .into_iter()
            .map(|(d, id)| (id, d.0))
            .collect();
        found.truncate(wanted);
        found
    }
}
