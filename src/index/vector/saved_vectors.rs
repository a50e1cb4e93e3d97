//! A saved graph's vectors, as a restart (or a graph built and saved by
//! this process) searches them. On disk, by data id: `vectors.f16` (the
//! vectors at the precision the graph was built with) and `vectors.i8`
//! (each vector scaled by its largest component into signed bytes, the
//! scales first). In memory only the bytes: a walk reads hundreds of
//! vectors per query scattered over the whole set, so whatever form it
//! walks ends up resident — 77 MB of bytes at 200,000 vectors instead of
//! the 154 MB of mapped f16 it used to touch. The few points a search
//! returns are scored again from the f16 file (`pread`, through the page
//! cache, never mapped), so rankings and scores are those of the f16
//! vectors.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::VectorError;
use crate::index::similarity::{dot_f32_f16, dot_f32_i8, from_f16, to_f16};

pub const F16_FILE: &str = "vectors.f16";
pub const I8_FILE: &str = "vectors.i8";

/// The largest byte a component scales to.
const BYTE_RANGE: f32 = 127.0;

/// `v` as bytes and the scale that gives them back (`byte * scale`).
fn quantise(v: &[f32], out: &mut Vec<i8>) -> f32 {
    let largest = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if largest == 0.0 || !largest.is_finite() {
        out.extend(std::iter::repeat_n(0i8, v.len()));
        return 0.0;
    }
    let scale = largest / BYTE_RANGE;
    out.extend(
        v.iter()
            .map(|x| (x / scale).round().clamp(-BYTE_RANGE, BYTE_RANGE) as i8),
    );
    scale
}

/// Writes the two files under `dir` from every point's vector in data id
/// order (`None`, a point with no vector, is written as zeros).
pub fn write(
    dir: &Path,
    dimension: usize,
    points: impl ExactSizeIterator<Item = Option<Vec<f32>>>,
) -> Result<(), VectorError> {
    let count = points.len();
    let mut halves = BufWriter::new(File::create(dir.join(F16_FILE))?);
    let mut scales = Vec::with_capacity(count);
    let mut bytes: Vec<i8> = Vec::with_capacity(count * dimension);
    let zeros = vec![0.0f32; dimension];
    for vector in points {
        let vector = vector.filter(|v| v.len() == dimension);
        let vector = vector.as_deref().unwrap_or(&zeros);
        for half in to_f16(vector) {
            halves.write_all(&half.to_le_bytes())?;
        }
        scales.push(quantise(vector, &mut bytes));
    }
    halves
        .into_inner()
        .map_err(|err| err.into_error())?
        .sync_all()?;
    let mut quantised = BufWriter::new(File::create(dir.join(I8_FILE))?);
    for scale in scales {
        quantised.write_all(&scale.to_le_bytes())?;
    }
    for chunk in bytes.chunks(1 << 16) {
        let chunk: Vec<u8> = chunk.iter().map(|b| *b as u8).collect();
        quantised.write_all(&chunk)?;
    }
    quantised
        .into_inner()
        .map_err(|err| err.into_error())?
        .sync_all()?;
    Ok(())
}

/// Length and CRC-32 of what `file` holds, each chunk also handed to
/// `chunk` (so a reader checks what it reads in the same pass).
pub(super) fn checksum(
    mut file: std::fs::File,
    mut chunk: impl FnMut(&[u8]),
) -> std::io::Result<(u64, u32)> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let read = std::io::Read::read(&mut file, &mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
        chunk(&buffer[..read]);
        len += read as u64;
    }
    Ok((len, hasher.finalize()))
}

pub struct SavedVectors {
    dimension: usize,
    /// The f16 vectors, read a point at a time.
    halves: File,
    /// `dimension` bytes per point.
    bytes: Vec<i8>,
    scales: Vec<f32>,
}

impl std::fmt::Debug for SavedVectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedVectors")
            .field("points", &self.scales.len())
            .finish()
    }
}

fn unusable(what: impl Into<String>) -> VectorError {
    VectorError::Unusable(what.into())
}

impl SavedVectors {
    /// Reads the bytes of `points` vectors under `dir` and opens their f16
    /// file; refuses files of another size. Also gives the byte file's
    /// length and CRC-32, taken as it was read.
    pub fn open(
        dir: &Path,
        dimension: usize,
        points: usize,
    ) -> Result<(SavedVectors, (u64, u32)), VectorError> {
        let halves = File::open(dir.join(F16_FILE))?;
        if halves.metadata()?.len() != (points * dimension * 2) as u64 {
            return Err(unusable("its f16 vectors are not the size saved"));
        }
        let file = File::open(dir.join(I8_FILE))?;
        if file.metadata()?.len() != (points * (4 + dimension)) as u64 {
            return Err(unusable("its byte vectors are not the size saved"));
        }
        // The scales come first, then the bytes.
        let mut scale_bytes = Vec::with_capacity(points * 4);
        let mut bytes = Vec::with_capacity(points * dimension);
        let written = checksum(file, |mut chunk| {
            let scales_missing = points * 4 - scale_bytes.len();
            let scales = chunk.len().min(scales_missing);
            scale_bytes.extend_from_slice(&chunk[..scales]);
            chunk = &chunk[scales..];
            bytes.extend(chunk.iter().map(|b| *b as i8));
        })?;
        if bytes.len() != points * dimension {
            return Err(unusable("its byte vectors ended early"));
        }
        let scales = scale_bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok((
            SavedVectors {
                dimension,
                halves,
                bytes,
                scales,
            },
            written,
        ))
    }

    pub fn len(&self) -> usize {
        self.scales.len()
    }

    /// The dot product of `query` with point `id`'s bytes (within about
    /// 1e-3 of the f16 one); `None` past the end.
    pub fn approximate(&self, query: &[f32], id: usize) -> Option<f32> {
        let at = id.checked_mul(self.dimension)?;
        let bytes = self.bytes.get(at..at + self.dimension)?;
        Some(self.scales.get(id)? * dot_f32_i8(query, bytes))
    }

    fn halves_of(&self, id: usize) -> Option<Vec<u16>> {
        if id >= self.len() {
            return None;
        }
        let mut raw = vec![0u8; self.dimension * 2];
        self.halves
            .read_exact_at(&mut raw, (id * self.dimension * 2) as u64)
            .ok()?;
        Some(
            raw.chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect(),
        )
    }

    /// The dot product of `query` with point `id`'s f16 vector, read from
    /// its file; `None` past the end or if the read fails.
    pub fn exact(&self, query: &[f32], id: usize) -> Option<f32> {
        self.halves_of(id).map(|v| dot_f32_f16(query, &v))
    }

    /// Point `id`'s vector, read from its file.
    pub fn vector(&self, id: usize) -> Option<Vec<f32>> {
        self.halves_of(id).map(|v| from_f16(&v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_vectors_score_within_rounding_of_the_f16_ones_and_refuse_other_sizes() {
        let dims = 384;
        let vector = |seed: u64| crate::index::similarity::tests::unit(seed, dims);
        let root = tempfile::tempdir().expect("temp dir");
        let points: Vec<Option<Vec<f32>>> = (0..50).map(|i| (i != 7).then(|| vector(i))).collect();
        write(root.path(), dims, points.clone().into_iter()).expect("written");
        let (saved, _) = SavedVectors::open(root.path(), dims, 50).expect("opened");
        assert_eq!(saved.len(), 50);
        let query = vector(1000);
        for (id, point) in points.iter().enumerate() {
            let Some(point) = point else {
                assert_eq!(saved.approximate(&query, id), Some(0.0));
                assert_eq!(saved.vector(id), Some(vec![0.0; dims]));
                continue;
            };
            let exact = crate::index::similarity::dot(&query, point);
            let read = saved.exact(&query, id).expect("read");
            let approximate = saved.approximate(&query, id).expect("held");
            assert!((read - exact).abs() < 1e-3, "{read} / {exact}");
            assert!(
                (approximate - exact).abs() < 5e-3,
                "{approximate} / {exact}"
            );
            assert_eq!(saved.vector(id).map(|v| v.len()), Some(dims));
        }
        assert_eq!(saved.exact(&query, 50), None);
        assert_eq!(saved.approximate(&query, 50), None);
        // Another count than was written is refused, not misread.
        assert!(matches!(
            SavedVectors::open(root.path(), dims, 49),
            Err(VectorError::Unusable(_))
        ));
        assert!(matches!(
            SavedVectors::open(root.path(), dims / 2, 50),
            Err(VectorError::Unusable(_))
        ));
    }
}
