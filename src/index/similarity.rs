//! Generic vector math the index and skills share: dot products over f32,
//! f16 and signed bytes (with AVX2/F16C/FMA kernels picked at run time),
//! f16 conversion and normalisation. A leaf: it knows nothing of tools or
//! backends, so any part of the crate can score vectors without reaching
//! into the vector index.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use hnsw_rs::prelude::Distance;

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent accumulators let the compiler vectorise the loop.
    let mut acc = [0.0f32; 8];
    let chunks_a = a.chunks_exact(8);
    let chunks_b = b.chunks_exact(8);
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (x, y) in chunks_a.zip(chunks_b) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = rest_a.iter().zip(rest_b).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// The unit-length mean of some vectors (`None` if there are none or
/// they cancel out).
pub fn normalised_mean<'a>(vectors: impl Iterator<Item = &'a [f32]>) -> Option<Vec<f32>> {
    let mut sum: Option<Vec<f32>> = None;
    for v in vectors {
        let acc = sum.get_or_insert_with(|| vec![0.0; v.len()]);
        if acc.len() == v.len() {
            acc.iter_mut().zip(v).for_each(|(a, x)| *a += x);
        }
    }
    let mut sum = sum?;
    let norm = dot(&sum, &sum).sqrt();
    if !norm.is_finite() || norm < 1e-12 {
        return None;
    }
    sum.iter_mut().for_each(|x| *x /= norm);
    Some(sum)
}

/// The graph's distance: 1 − cosine of unit vectors kept as half-precision
/// floats (their bits, `u16`, which hnsw_rs can dump and map). A graph of
/// 200,000 vectors holds 300 MB of f32 and half that in f16, while the
/// ranking barely moves: the exact top 10 over f16 copies of 200,000
/// embedding-shaped vectors is 99.8 % the f32 top 10 (i8 with a scale per
/// vector: 97.3 %, too lossy without a second, exact pass). The hardware's
/// f16 conversion (F16C, detected at run time) keeps it about as fast as
/// hnsw_rs's own `DistDot` on f32.
#[derive(Debug, Default, Clone, Copy)]
pub struct DotF16;

impl Distance<u16> for DotF16 {
    fn eval(&self, a: &[u16], b: &[u16]) -> f32 {
        // Never negative: rounding must not make a point nearer than
        // itself (hnsw_rs orders by it).
        (1.0 - dot_f16(a, b)).max(0.0)
    }
}

/// The dot product of two f16 vectors (their bits). The graph's build and
/// walk spend most of their time here: with AVX2, F16C and FMA (checked at
/// run time; the release targets baseline x86-64) eight lanes are
/// converted and multiplied per instruction, as fast as hnsw_rs's SIMD
/// `DistDot` on f32; elsewhere a chunk at a time through `half`.
fn dot_f16(a: &[u16], b: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { simd::dot_f16(a, b) };
    }
    dot_f16_portable(a, b)
}

/// `dot` of an f32 vector and an f16 one (the scan of a saved graph's
/// vectors).
pub(super) fn dot_f32_f16(a: &[f32], b: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { simd::dot_f32_f16(a, b) };
    }
    dot_f32_f16_portable(a, b)
}

/// `dot` of an f32 vector and signed bytes (the walk over a saved
/// graph's byte copies; the caller scales).
pub(super) fn dot_f32_i8(a: &[f32], b: &[i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { simd::dot_f32_i8(a, b) };
    }
    dot_f32_i8_portable(a, b)
}

fn dot_f32_i8_portable(a: &[f32], b: &[i8]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (chunks_a, chunks_b) = (a.chunks_exact(8), b.chunks_exact(8));
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (x, y) in chunks_a.zip(chunks_b) {
        for i in 0..8 {
            acc[i] += x[i] * f32::from(y[i]);
        }
    }
    let tail: f32 = rest_a
        .iter()
        .zip(rest_b)
        .map(|(x, y)| x * f32::from(*y))
        .sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::{
        __m128i, __m256, _mm_loadu_si128, _mm_srli_si128, _mm256_add_ps, _mm256_cvtepi8_epi32,
        _mm256_cvtepi32_ps, _mm256_cvtph_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };

    pub fn available() -> bool {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("f16c")
            && std::is_x86_feature_detected!("fma")
    }

    #[target_feature(enable = "avx2,f16c,fma")]
    fn sum(acc: __m256) -> f32 {
        let mut lanes = [0.0f32; 8];
        // SAFETY: writes eight lanes into an eight-float array.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        lanes.iter().sum()
    }

    /// # Safety
    /// The CPU must have AVX2, F16C and FMA (`available`).
    #[target_feature(enable = "avx2,f16c,fma")]
    pub unsafe fn dot_f16(a: &[u16], b: &[u16]) -> f32 {
        let n = a.len().min(b.len());
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        // SAFETY: every load reads eight u16 at `i..i + 8 <= n`.
        unsafe {
            while i + 16 <= n {
                let a0 = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i).cast::<__m128i>()));
                let b0 = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>()));
                let a1 = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i + 8).cast::<__m128i>()));
                let b1 = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i + 8).cast::<__m128i>()));
                acc0 = _mm256_fmadd_ps(a0, b0, acc0);
                acc1 = _mm256_fmadd_ps(a1, b1, acc1);
                i += 16;
            }
            while i + 8 <= n {
                let a0 = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(i).cast::<__m128i>()));
                let b0 = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>()));
                acc0 = _mm256_fmadd_ps(a0, b0, acc0);
                i += 8;
            }
        }
        sum(_mm256_add_ps(acc0, acc1)) + super::dot_f16_portable(&a[i..n], &b[i..n])
    }

    /// # Safety
    /// The CPU must have AVX2, F16C and FMA (`available`).
    #[target_feature(enable = "avx2,f16c,fma")]
    pub unsafe fn dot_f32_f16(a: &[f32], b: &[u16]) -> f32 {
        let n = a.len().min(b.len());
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY: every load reads eight values at `i..i + 8 <= n`.
        unsafe {
            while i + 8 <= n {
                let a0 = _mm256_loadu_ps(a.as_ptr().add(i));
                let b0 = _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>()));
                acc = _mm256_fmadd_ps(a0, b0, acc);
                i += 8;
            }
        }
        sum(acc) + super::dot_f32_f16_portable(&a[i..n], &b[i..n])
    }

    /// # Safety
    /// The CPU must have AVX2, F16C and FMA (`available`).
    #[target_feature(enable = "avx2,f16c,fma")]
    pub unsafe fn dot_f32_i8(a: &[f32], b: &[i8]) -> f32 {
        let n = a.len().min(b.len());
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        // SAFETY: every load reads sixteen bytes or eight floats at
        // `i..i + 16 <= n`.
        unsafe {
            while i + 16 <= n {
                let bytes = _mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>());
                let low = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
                let high = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(bytes)));
                acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), low, acc0);
                acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i + 8)), high, acc1);
                i += 16;
            }
        }
        sum(_mm256_add_ps(acc0, acc1)) + super::dot_f32_i8_portable(&a[i..n], &b[i..n])
    }
}

/// Converted a chunk at a time into stack buffers, the f32 dot product on
/// each.
fn dot_f16_portable(a: &[u16], b: &[u16]) -> f32 {
    const CHUNK: usize = 64;
    let (mut fa, mut fb) = ([0.0f32; CHUNK], [0.0f32; CHUNK]);
    let mut sum = 0.0;
    for (ca, cb) in a.chunks(CHUNK).zip(b.chunks(CHUNK)) {
        let n = ca.len().min(cb.len());
        ca[..n]
            .reinterpret_cast::<f16>()
            .convert_to_f32_slice(&mut fa[..n]);
        cb[..n]
            .reinterpret_cast::<f16>()
            .convert_to_f32_slice(&mut fb[..n]);
        sum += dot(&fa[..n], &fb[..n]);
    }
    sum
}

pub(super) fn to_f16(v: &[f32]) -> Vec<u16> {
    let mut halves = vec![f16::ZERO; v.len()];
    halves.convert_from_f32_slice(v);
    halves.iter().map(|h| h.to_bits()).collect()
}

fn dot_f32_f16_portable(a: &[f32], b: &[u16]) -> f32 {
    const CHUNK: usize = 64;
    let mut fb = [0.0f32; CHUNK];
    let mut sum = 0.0;
    for (ca, cb) in a.chunks(CHUNK).zip(b.chunks(CHUNK)) {
        let n = ca.len().min(cb.len());
        cb[..n]
            .reinterpret_cast::<f16>()
            .convert_to_f32_slice(&mut fb[..n]);
        sum += dot(&ca[..n], &fb[..n]);
    }
    sum
}

pub(super) fn from_f16(v: &[u16]) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    v.reinterpret_cast::<f16>().convert_to_f32_slice(&mut out);
    out
}

#[cfg(test)]
pub(in crate::index) mod tests {
    use super::*;

    pub(in crate::index) fn unit(seed: u64, dims: usize) -> Vec<f32> {
        // Deterministic pseudo-random vectors (xorshift), normalised.
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut v: Vec<f32> = (0..dims)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    }

    #[test]
    fn f16_and_byte_dot_products_agree_with_f32_on_every_path() {
        for dims in [384, 16, 13, 7] {
            let (a, b) = (unit(dims as u64, dims), unit(dims as u64 + 1, dims));
            let (ha, hb) = (to_f16(&a), to_f16(&b));
            let exact = dot(&from_f16(&ha), &from_f16(&hb));
            for got in [
                dot_f16(&ha, &hb),
                dot_f16_portable(&ha, &hb),
                1.0 - DotF16.eval(&ha, &hb),
            ] {
                assert!((got - exact).abs() < 1e-5, "{dims}: {got} / {exact}");
            }
            let mixed = dot(&a, &from_f16(&hb));
            for got in [dot_f32_f16(&a, &hb), dot_f32_f16_portable(&a, &hb)] {
                assert!((got - mixed).abs() < 1e-5, "{dims}: {got} / {mixed}");
            }
            // And f16 copies stay within rounding of the f32 cosine.
            assert!((exact - dot(&a, &b)).abs() < 1e-3);
            let bytes: Vec<i8> = (0..dims)
                .map(|i| (i as i32 * 37 % 255 - 127) as i8)
                .collect();
            let widened: Vec<f32> = bytes.iter().map(|b| f32::from(*b)).collect();
            let want = dot(&a, &widened);
            for got in [dot_f32_i8(&a, &bytes), dot_f32_i8_portable(&a, &bytes)] {
                assert!(
                    (got - want).abs() < 1e-4 * want.abs().max(1.0),
                    "{dims}: {got} / {want}"
                );
            }
        }
    }
}
