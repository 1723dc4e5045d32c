//! A call's raw inputs as the fast path sees them: words to hash and compare, built on the
//! stack for every hot call, before anything is encoded or any pointer is looked up.

use std::hash::Hasher;

/// The most words a raw key may have; a call with more arguments takes the slow path.
pub(super) const RAW_WORDS: usize = 32;

/// A call's raw inputs as words: what the fast path hashes and compares. A fixed array on
/// the stack: this is built for every hot call.
pub(crate) struct RawKey {
    words: [u64; RAW_WORDS],
    len: usize,
    /// Bit i: word i is the value of a scalar argument (at most 8 bytes).
    pub(super) scalars: u32,
}

/// FxHash's multiplier.
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl RawKey {
    /// A key for a call of `kind` (any constant that tells the calls apart) from the call
    /// site `site` on recorder thread `thread`.
    #[inline(always)]
    pub fn new(kind: u64, site: usize, thread: u16) -> Self {
        let mut words = [0; RAW_WORDS];
        words[0] = kind | (u64::from(thread) << 32);
        words[1] = site as u64;
        RawKey {
            words,
            len: 2,
            scalars: 0,
        }
    }

    #[inline(always)]
    pub fn word(&mut self, w: u64) {
        if let Some(slot) = self.words.get_mut(self.len) {
            *slot = w;
        }
        // Past the end `len` still counts: the key no longer fits.
        self.len += 1;
    }

    /// A launch's kernel handle, dimensions, shared memory, argument count and stream.
    #[inline(always)]
    pub fn launch(
        &mut self,
        func: u64,
        (grid, block): ([u32; 3], [u32; 3]),
        shared_mem: u32,
        n_args: usize,
        stream: u64,
    ) {
        self.word(func);
        self.pair(grid[0], grid[1]);
        self.pair(grid[2], block[0]);
        self.pair(block[1], block[2]);
        self.pair(shared_mem, n_args as u32);
        self.word(stream);
    }

    /// Two 32-bit values in one word.
    #[inline(always)]
    fn pair(&mut self, a: u32, b: u32) {
        self.word(u64::from(a) | (u64::from(b) << 32));
    }

    /// A byte argument: its length, then its bytes eight to a word. A typed launch's pointer
    /// arguments are marked with a word that no length word can be (`word(1)` then the
    /// pointer). Values of 8 bytes or less are marked scalar; a raw launch's parameter
    /// buffer passes through here too, but only typed launches are found as scalar deltas
    /// (`launch_val_spans` reads those alone).
    #[inline(always)]
    pub fn bytes(&mut self, b: &[u8]) {
        if b.len() <= 8 {
            // The usual scalar: its length, then its bytes in one word, put together with
            // loads of its own size (bytes copied into a word and read back stall the load).
            let w = match *b {
                [a, b, c, d] => u64::from(u32::from_le_bytes([a, b, c, d])),
                [a, b, c, d, e, f, g, h] => u64::from_le_bytes([a, b, c, d, e, f, g, h]),
                _ => b
                    .iter()
                    .rev()
                    .fold(0u64, |acc, x| (acc << 8) | u64::from(*x)),
            };
            self.word(2 | ((b.len() as u64) << 8));
            if self.len < RAW_WORDS {
                self.scalars |= 1 << self.len;
            }
            self.word(w);
            return;
        }
        self.word(2 | ((b.len() as u64) << 8));
        let mut rest = b;
        while rest.len() >= 8 {
            let (w, r) = rest.split_at(8);
            self.word(u64::from_le_bytes(w.try_into().expect("8 bytes")));
            rest = r;
        }
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(w));
        }
    }

    #[inline(always)]
    pub(super) fn fits(&self) -> bool {
        self.len <= RAW_WORDS
    }

    #[inline(always)]
    pub(super) fn words(&self) -> &[u64] {
        &self.words[..self.len.min(RAW_WORDS)]
    }

    /// The hash of the key with its scalar values left out.
    pub(super) fn shape_hash(&self) -> u64 {
        let mut k = RawKey {
            words: self.words,
            len: self.len,
            scalars: self.scalars,
        };
        for (i, w) in k.words.iter_mut().enumerate() {
            if self.scalars & (1 << i) != 0 {
                *w = 0;
            }
        }
        k.hash()
    }

    /// Four independent lanes, so the multiplies overlap instead of queueing.
    #[inline(always)]
    pub(super) fn hash(&self) -> u64 {
        let mix = |l: u64, w: u64| (l ^ w).wrapping_mul(SEED).rotate_left(23);
        let words = self.words();
        let (mut a, mut b, mut c, mut d) = (0u64, 1u64, 2u64, 3u64);
        let mut quads = words.chunks_exact(4);
        for q in &mut quads {
            a = mix(a, q[0]);
            b = mix(b, q[1]);
            c = mix(c, q[2]);
            d = mix(d, q[3]);
        }
        for w in quads.remainder() {
            a = mix(a, *w);
        }
        (a ^ b.rotate_left(16) ^ c.rotate_left(32) ^ d.rotate_left(48)).wrapping_mul(SEED)
    }
}

/// The raw cache is keyed by `RawKey`'s own hash: hashing it again would be wasted.
#[derive(Default)]
pub(super) struct PassHasher(u64);

impl Hasher for PassHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(SEED);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}
