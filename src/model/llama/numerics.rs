//! The bf16 step's arithmetic on the host, operation for operation as `kernels/llama/common.cuh`
//! does it on the device: bf16 widening and rounding by their bits, and an exponential from
//! floor, fused multiply-adds and exponent bits only. Nothing here calls the host's libm for a
//! transcendental, which is what lets the CPU twins match the CUDA kernels bit for bit.

/// bf16 bits to f32 (exact): the bits shifted, as the kernels' `bf16_to_f32` does. Not
/// `half::bf16::to_f32`, which differs on the 126 signaling-NaN patterns: it sets their quiet
/// bit (test `half_widens_bf16_as_the_kernels_do_but_for_signaling_nans`).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bf16 bits: round to nearest, ties to even; a NaN keeps its sign and top payload bits
/// and is made quiet. `half::bf16::from_f32`, which gives the kernels' `f32_to_bf16` bits on
/// every one of the 2^32 inputs (checked against common.cuh's rounding, line for line, by the
/// tests `half_rounds_to_bf16_as_the_kernels_do_*`; the exhaustive one is run by hand).
pub fn f32_to_bf16(f: f32) -> u16 {
    half::bf16::from_f32(f).to_bits()
}

/// e^x as the kernels compute it: 2^(x log2 e), the fraction's power by a degree-7 Taylor
/// polynomial in fused multiply-adds, the integer part put into the exponent. x is clamped to
/// [-87, 88] so the result is a normal float.
pub fn gt_exp(x: f32) -> f32 {
    // Constants by their bits, as common.cuh writes them: the same floats exactly.
    // max and min, not clamp: a NaN becomes -87, as fmaxf makes it on the device.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-87.0).min(88.0);
    let t = x * f32::from_bits(0x3fb8_aa3b); // log2 e
    let fi = t.floor();
    let f = t - fi;
    let mut p = f32::from_bits(0x377f_e5fe); // ln2^7 / 7!
    for c in [
        0x3921_8489,
        0x3aae_c3ff,
        0x3c1d_955b,
        0x3d63_5847,
        0x3e75_fdf0,
        0x3f31_7218,
        0x3f80_0000,
    ] {
        p = p.mul_add(f, f32::from_bits(c));
    }
    p * f32::from_bits((((fi as i32) + 127) as u32) << 23)
}

/// splitmix64 of `seed` at index `i`: the generator `fill_bf16` runs per element.
pub fn splitmix_at(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add((i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Element `i` of a seeded bf16 tensor: offset + scale * u, u uniform in [-1, 1).
pub fn fill_value(seed: u64, i: u64, scale: f32, offset: f32) -> u16 {
    let u = ((splitmix_at(seed, i) >> 40) as u32) as f32 / 16_777_216.0;
    f32_to_bf16((u * 2.0 - 1.0) * scale + offset)
}

/// Lane sums meeting in a warp's butterfly (partners at xor 16, 8, 4, 2, 1); lane 0's result.
pub fn butterfly(mut lanes: [f32; 32]) -> f32 {
    for off in [16, 8, 4, 2, 1] {
        let before = lanes;
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = before[i] + before[i ^ off];
        }
    }
    lanes[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f32_to_bf16` of `kernels/llama/common.cuh`, line for line: the reference the host's
    /// rounding must match bit for bit.
    fn kernel_f32_to_bf16(f: f32) -> u16 {
        let u = f.to_bits();
        if u & 0x7fff_ffff > 0x7f80_0000 {
            return ((u >> 16) | 0x40) as u16;
        }
        (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
    }

    /// `half::bf16::from_f32` against the kernel's rounding over `bits`; the first disagreement.
    fn half_disagrees(bits: impl Iterator<Item = u32>) -> Option<(u32, u16, u16)> {
        bits.map(|u| {
            let f = f32::from_bits(u);
            (u, half::bf16::from_f32(f).to_bits(), kernel_f32_to_bf16(f))
        })
        .find(|(_, h, k)| h != k)
    }

    /// Bit patterns where rounding to bf16 can go wrong: signed zeros and infinities, NaNs with
    /// payloads above, at and below the bits bf16 keeps (signaling and quiet), subnormals, and
    /// for every upper half (each bf16 value, the largest finite one rounding up to infinity
    /// included) the lower halves around the tie: 0, 1, 0x7fff, 0x8000, 0x8001, 0xffff.
    fn special_bits() -> impl Iterator<Item = u32> {
        let fixed = [
            0x0000_0000u32,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0xffc0_0000,
            0x7f80_0001,
            0x7f80_8000,
            0x7f80_ffff,
            0x7fa0_0000,
            0x7fbf_ffff,
            0x7fff_ffff,
            0xff80_0001,
            0xffbf_8000,
            0xffff_ffff,
            0x0000_0001,
            0x007f_ffff,
            0x0000_8000,
            0x0001_8000,
            0x8000_8000,
            0x807f_ffff,
            0x7f7f_ffff,
            0x7f7f_8000,
            0xff7f_8000,
        ];
        let ties = (0..=0xffffu32)
            .flat_map(|hi| [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff].map(|lo| hi << 16 | lo));
        fixed.into_iter().chain(ties)
    }

    #[test]
    fn half_rounds_to_bf16_as_the_kernels_do_on_a_stratified_sample() {
        let sample = (0..=u32::MAX / 4099).map(|i| i * 4099);
        assert_eq!(half_disagrees(sample.chain(special_bits())), None);
    }

    /// All 2^32 patterns: run once by hand in release (`cargo test -j 1 --release --lib --
    /// --ignored half_rounds_to_bf16_as_the_kernels_do_on_every_f32`).
    #[test]
    #[ignore = "2^32 conversions: run in release by hand"]
    fn half_rounds_to_bf16_as_the_kernels_do_on_every_f32() {
        assert_eq!(half_disagrees(0..=u32::MAX), None);
    }

    /// Widening differs on signaling NaNs only: the kernels shift the bits, half sets the quiet
    /// bit. So `bf16_to_f32` stays the shift.
    #[test]
    fn half_widens_bf16_as_the_kernels_do_but_for_signaling_nans() {
        let differ: Vec<u16> = (0..=u16::MAX)
            .filter(|&h| half::bf16::from_bits(h).to_f32().to_bits() != bf16_to_f32(h).to_bits())
            .collect();
        let signaling: Vec<u16> = (0..=u16::MAX)
            .filter(|h| h & 0x7f80 == 0x7f80 && h & 0x7f != 0 && h & 0x40 == 0)
            .collect();
        assert_eq!(signaling.len(), 126);
        assert_eq!(differ, signaling);
        for h in differ {
            let quieted = bf16_to_f32(h).to_bits() | 0x0040_0000;
            assert_eq!(half::bf16::from_bits(h).to_f32().to_bits(), quieted);
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8 is halfway too: the even neighbour is above.
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bf16_to_f32(f32_to_bf16(-2.5)), -2.5);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
    }

    #[test]
    fn gt_exp_is_close_to_exp_over_the_softmax_range() {
        let mut worst = 0.0f64;
        for i in 0..=2000 {
            let x = -80.0 + i as f32 * 0.045;
            let rel = ((gt_exp(x) as f64) - (x as f64).exp()).abs() / (x as f64).exp();
            worst = worst.max(rel);
        }
        assert!(worst < 5e-6, "worst relative error {worst}");
        assert!(gt_exp(-1000.0) > 0.0 && gt_exp(1000.0).is_finite());
    }

    #[test]
    fn fill_values_are_in_range_and_seeded() {
        let v: Vec<f32> = (0..1000)
            .map(|i| bf16_to_f32(fill_value(7, i, 0.5, 1.0)))
            .collect();
        assert!(v.iter().all(|x| (0.49..=1.51).contains(x)));
        assert_ne!(fill_value(7, 3, 0.5, 0.0), fill_value(8, 3, 0.5, 0.0));
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        assert!((mean - 1.0).abs() < 0.05, "mean {mean}");
    }
}
