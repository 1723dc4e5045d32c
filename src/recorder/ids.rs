//! Raw handles to trace ids: the counter-and-map pair events and graphs share in `RecState`.

use rustc_hash::FxHashMap as HashMap;

/// Raw handles to trace ids numbered in order of first sight, the next id kept beside the map:
/// what events and graphs share (streams and buffers number with more rules of their own).
pub(crate) struct IdMap<I> {
    map: HashMap<u64, I>,
    next: u32,
    make: fn(u32) -> I,
}

impl<I: Copy> IdMap<I> {
    pub fn new(make: fn(u32) -> I) -> Self {
        IdMap {
            map: HashMap::default(),
            next: 0,
            make,
        }
    }

    /// The id `raw` has, if it has one.
    pub fn get(&self, raw: u64) -> Option<I> {
        self.map.get(&raw).copied()
    }

    /// A new id for `raw` (a handle the backend may have reused gets a new one).
    pub fn fresh(&mut self, raw: u64) -> I {
        let id = (self.make)(self.next);
        self.next += 1;
        self.map.insert(raw, id);
        id
    }

    /// `raw` released: its id goes.
    pub fn remove(&mut self, raw: u64) -> Option<I> {
        self.map.remove(&raw)
    }

    /// Every id live now.
    pub fn ids(&self) -> impl Iterator<Item = I> + '_ {
        self.map.values().copied()
    }
}
