//! An element type from the bytes a launch wrote, for kernels whose names say none.

use super::Inferred;
use crate::backend::ElemType;

/// Infer the element type of bytes a kernel wrote: the first of bf16, f32 and f16 under which
/// nearly every value (98%) is zero or a normal number of a plausible magnitude (2^-40 to
/// 2^40). The order matters: f32 data read as bf16 has random low halves (about one in four
/// plausible); f16 read as bf16 or f32 puts its exponent bits in the wrong place (magnitudes
/// past 2^±60); f16's narrow range makes most bits plausible as f16, so it is tried last
/// (random bits still fail it: one in sixteen is subnormal, Inf or NaN), and bf16 is taken
/// only where its magnitudes span a believable number of octaves (`MAX_OCTAVES`). Data mostly
/// zero, or f32 whose low halves are nearly all zero (bf16 widened, small integers), says
/// nothing narrower than f32.
pub fn infer(bytes: &[u8]) -> Option<Inferred> {
    const MIN_NONZERO: usize = 16;
    const NEED: u32 = 980;
    // Zero, or a normal number (no subnormal, no Inf or NaN) of a plausible magnitude.
    let judge = |elem: ElemType| -> Option<Inferred> {
        let (width, mant, bias, top) = match elem {
            ElemType::F32 => (4, 23, 127, 255),
            ElemType::Bf16 => (2, 7, 127, 255),
            ElemType::F16 => (2, 10, 15, 31),
        };
        let words: Vec<u32> = bytes
            .chunks_exact(width)
            .map(|w| match width {
                4 => u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
                _ => u16::from_le_bytes([w[0], w[1]]) as u32,
            })
            .collect();
        let sign = 1u32 << (width * 8 - 1);
        let nonzero = words.iter().filter(|w| **w & !sign != 0).count();
        if words.is_empty() || nonzero < MIN_NONZERO {
            return None;
        }
        let ok = words
            .iter()
            .filter(|w| {
                let exp = ((**w & !sign) >> mant) as i32;
                **w & !sign == 0 || (exp != 0 && exp != top && (exp - bias).abs() <= 40)
            })
            .count();
        let permille = (ok * 1000 / words.len()) as u32;
        (permille >= NEED).then_some(Inferred {
            elem,
            plausible_permille: permille,
            values: words.len() as u32,
        })
    };
    // bf16 widened to f32 reads as bf16 with every other value zero: it is f32.
    let halves: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|w| u16::from_le_bytes([w[0], w[1]]))
        .collect();
    // (Read as bf16, such a low half is a signed zero: f32s holding small integers, or few
    // mantissa bits, have them too.)
    let low_zero = halves
        .iter()
        .step_by(2)
        .filter(|h| **h & 0x7fff == 0)
        .count();
    let high_nonzero = halves
        .iter()
        .skip(1)
        .step_by(2)
        .filter(|h| **h != 0)
        .count();
    let widened = high_nonzero >= MIN_NONZERO && low_zero * 10 >= halves.len().div_ceil(2) * 9;
    if !widened && octaves_as_bf16(halves.iter()) <= MAX_OCTAVES {
        if let Some(i) = judge(ElemType::Bf16) {
            return Some(i);
        }
    }
    // An f32's exponent is its high half's, read as bf16.
    let f32_ok = octaves_as_bf16(halves.iter().skip(1).step_by(2)) <= MAX_OCTAVES;
    f32_ok.then(|| judge(ElemType::F32)).flatten().or_else(|| {
        if widened {
            None
        } else {
            judge(ElemType::F16)
        }
    })
}

/// How many octaves the middle 90% of a tensor's magnitudes may span and still read as bf16:
/// f16 read as bf16 puts three mantissa bits into the exponent, spreading its values over eight
/// times as many octaves (a tensor between 0.01 and 3 reads as spanning about 60).
const MAX_OCTAVES: i32 = 20;

/// The span, in octaves, of the middle 90% of the nonzero finite bf16 values' exponents.
fn octaves_as_bf16<'a>(halves: impl Iterator<Item = &'a u16>) -> i32 {
    let mut exps: Vec<i32> = halves
        .map(|h| ((h >> 7) & 0xff) as i32)
        .filter(|e| *e != 0 && *e != 0xff)
        .collect();
    if exps.is_empty() {
        return 0;
    }
    exps.sort_unstable();
    let at = |q: usize| exps[(exps.len() - 1) * q / 100];
    at(95) - at(5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_inferred_from_the_bytes_only_when_they_say_one() {
        let vals: Vec<f32> = (0..256)
            .map(|i| ((i as f32) * 0.37).sin() * 3.0 + 0.01)
            .collect();
        let f32s: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bf16s: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect();
        let f16s: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        let widened: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_f32().to_le_bytes())
            .collect();
        assert_eq!(infer(&f32s).map(|i| i.elem), Some(ElemType::F32));
        assert_eq!(infer(&bf16s).map(|i| i.elem), Some(ElemType::Bf16));
        assert_eq!(infer(&f16s).map(|i| i.elem), Some(ElemType::F16));
        assert_eq!(infer(&widened).map(|i| i.elem), Some(ElemType::F32));
        assert_eq!(infer(&[0u8; 1024]), None, "zeros say nothing");
        let ints: Vec<u8> = (0..512u32).flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(
            infer(&ints).map(|i| i.elem),
            None,
            "small integers are no float"
        );
    }
}
