//! Collectives between ranks: what a communicator is asked to do, in the words a trace keeps.
//!
//! A tensor-parallel engine runs one rank per GPU and joins them with collectives (an
//! all-reduce after attention and after the MLP). The backend world speaks of them as NCCL
//! does: a communicator made from a unique id that every rank shares, then collectives on a
//! stream, each over `count` elements of one type. The reduction itself lives here, on host
//! bytes, so the mock's ranks and a replay's check agree on what a sum is.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What every rank of a communicator is made from (NCCL's unique id, shortened to what a
/// trace needs to tell worlds apart): rank 0 asks for one and hands it to the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CommUniqueId(pub [u8; 16]);

impl CommUniqueId {
    /// All 32 hex digits (`Display` shows the first 8): a name for files a rank set shares.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for CommUniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..4] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Which exchange a collective is, named the same on every rank that takes part in it: a
/// group collective by its number on the communicator, a send or a receive by its sender,
/// its receiver and its number between the two (`Numbering`). What the mock's ranks meet
/// by, and what the rank-set analysis, its replay and its minimizer pair calls by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Exchange {
    /// A group collective, by its number.
    Group(u64),
    /// A send and its receive.
    Pair {
        /// The sender.
        from: u32,
        /// The receiver.
        to: u32,
        /// Their number between the two.
        seq: u64,
    },
}

impl Exchange {
    /// Collective `op`, numbered `seq`, made by `rank`.
    pub fn of(op: Collective, seq: u64, rank: u32) -> Self {
        match op {
            Collective::Send { peer } => Exchange::Pair {
                from: rank,
                to: peer,
                seq,
            },
            Collective::Recv { peer } => Exchange::Pair {
                from: peer,
                to: rank,
                seq,
            },
            _ => Exchange::Group(seq),
        }
    }
}

/// One rank's numbers on a communicator: its group collectives counted on the communicator,
/// its sends to (receives from) each peer counted per peer, so the k-th send from a to b is
/// b's k-th receive from a whatever the other ranks do. The mock's ranks and the recorder
/// number alike by it.
#[derive(Clone, Debug, Default)]
pub struct Numbering {
    /// The number of the next group collective.
    pub group: u64,
    /// The number of the next send to (`true`) or receive from (`false`) each peer.
    pairs: std::collections::HashMap<(u32, bool), u64>,
}

impl Numbering {
    /// The numbers of the next send to (`true`) or receive from (`false`) each peer that has
    /// had one, by peer: what a checkpoint lists (`Adopted::CommPairs`).
    pub fn pairs(&self, send: bool) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .pairs
            .iter()
            .filter(|((_, s), _)| *s == send)
            .map(|((peer, _), n)| (*peer, *n))
            .collect();
        v.sort_unstable();
        v
    }

    /// The number `op` takes, and the count moved on.
    pub fn take(&mut self, op: Collective) -> u64 {
        let n = match op {
            Collective::Send { peer } => self.pairs.entry((peer, true)).or_insert(0),
            Collective::Recv { peer } => self.pairs.entry((peer, false)).or_insert(0),
            _ => &mut self.group,
        };
        *n += 1;
        *n - 1
    }
}

/// A communicator, as a backend hands it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommHandle(pub u64);

/// How an all-reduce or reduce-scatter combines the ranks' elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Largest.
    Max,
    /// Smallest.
    Min,
}

/// The element type a collective moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CollDtype {
    /// 32-bit float.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
    /// 32-bit signed integer.
    I32,
    /// Bytes.
    U8,
}

impl CollDtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            CollDtype::F32 | CollDtype::I32 => 4,
            CollDtype::Bf16 | CollDtype::F16 => 2,
            CollDtype::U8 => 1,
        }
    }
}

/// Which collective, with what it needs besides buffers and counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Collective {
    /// Every rank gets the reduction of every rank's `count` elements.
    AllReduce(ReduceOp),
    /// Every rank gets every rank's `count` elements, in rank order (`count * nranks` out).
    AllGather,
    /// Rank r gets the reduction of every rank's r-th block of `count` elements (`count *
    /// nranks` in).
    ReduceScatter(ReduceOp),
    /// Every rank gets the root's `count` elements.
    Broadcast {
        /// The rank whose elements go out.
        root: u32,
    },
    /// `count` elements to `peer`, which receives them with a `Recv` from this rank.
    Send {
        /// The receiving rank.
        peer: u32,
    },
    /// `count` elements from `peer`.
    Recv {
        /// The sending rank.
        peer: u32,
    },
}

impl Collective {
    /// Bytes this rank's send buffer holds for `count` elements of `dtype` among `nranks`.
    pub fn send_bytes(self, count: u64, dtype: CollDtype, nranks: u32) -> u64 {
        let n = count.saturating_mul(dtype.size());
        match self {
            Collective::ReduceScatter(_) => n.saturating_mul(nranks as u64),
            Collective::Recv { .. } => 0,
            _ => n,
        }
    }

    /// Bytes this rank's receive buffer gets.
    pub fn recv_bytes(self, count: u64, dtype: CollDtype, nranks: u32) -> u64 {
        let n = count.saturating_mul(dtype.size());
        match self {
            Collective::AllGather => n.saturating_mul(nranks as u64),
            Collective::Send { .. } => 0,
            _ => n,
        }
    }

    /// Its name, as NCCL's functions are called.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce(_) => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter(_) => "reduce_scatter",
            Collective::Broadcast { .. } => "broadcast",
            Collective::Send { .. } => "send",
            Collective::Recv { .. } => "recv",
        }
    }
}

/// `acc[i] = op(acc[i], x[i])` over elements of `dtype` (the lengths are equal, whole
/// elements). Half types are combined in f32 and rounded back to nearest even, as a
/// reduction kernel that loads, adds and stores does.
pub fn reduce_into(op: ReduceOp, dtype: CollDtype, acc: &mut [u8], x: &[u8]) {
    fn f<T: Copy>(op: ReduceOp, a: T, b: T, to: impl Fn(T) -> f64, from: impl Fn(f64) -> T) -> T {
        let (a, b) = (to(a), to(b));
        from(match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Prod => a * b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        })
    }
    let w = dtype.size() as usize;
    for (a, b) in acc.chunks_exact_mut(w).zip(x.chunks_exact(w)) {
        match dtype {
            CollDtype::F32 => {
                let v = f(
                    op,
                    f32::from_le_bytes(a.try_into().expect("4 bytes")),
                    f32::from_le_bytes(b.try_into().expect("4 bytes")),
                    |v| v as f64,
                    |v| v as f32,
                );
                a.copy_from_slice(&v.to_le_bytes());
            }
            CollDtype::I32 => {
                let (p, q) = (
                    i32::from_le_bytes(a.try_into().expect("4 bytes")),
                    i32::from_le_bytes(b.try_into().expect("4 bytes")),
                );
                let v = match op {
                    ReduceOp::Sum => p.wrapping_add(q),
                    ReduceOp::Prod => p.wrapping_mul(q),
                    ReduceOp::Max => p.max(q),
                    ReduceOp::Min => p.min(q),
                };
                a.copy_from_slice(&v.to_le_bytes());
            }
            CollDtype::Bf16 => {
                let v = f(
                    op,
                    half::bf16::from_le_bytes([a[0], a[1]]),
                    half::bf16::from_le_bytes([b[0], b[1]]),
                    |v| v.to_f64(),
                    |v| half::bf16::from_f32(v as f32),
                );
                a.copy_from_slice(&v.to_le_bytes());
            }
            CollDtype::F16 => {
                let v = f(
                    op,
                    half::f16::from_le_bytes([a[0], a[1]]),
                    half::f16::from_le_bytes([b[0], b[1]]),
                    |v| v.to_f64(),
                    |v| half::f16::from_f32(v as f32),
                );
                a.copy_from_slice(&v.to_le_bytes());
            }
            CollDtype::U8 => {
                let v = match op {
                    ReduceOp::Sum => a[0].wrapping_add(b[0]),
                    ReduceOp::Prod => a[0].wrapping_mul(b[0]),
                    ReduceOp::Max => a[0].max(b[0]),
                    ReduceOp::Min => a[0].min(b[0]),
                };
                a[0] = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_combine_elements_of_each_type() {
        let mut a: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let b: Vec<u8> = [2.0f32, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        reduce_into(ReduceOp::Sum, CollDtype::F32, &mut a, &b);
        assert_eq!(&a[..4], &3.5f32.to_le_bytes());
        assert_eq!(&a[4..], &1.0f32.to_le_bytes());
        let mut m: Vec<u8> = [7i32, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let n: Vec<u8> = [3i32, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        reduce_into(ReduceOp::Max, CollDtype::I32, &mut m, &n);
        assert_eq!(
            m,
            [7i32, 4]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
        let mut h = half::bf16::from_f32(1.0).to_le_bytes().to_vec();
        reduce_into(
            ReduceOp::Sum,
            CollDtype::Bf16,
            &mut h,
            &half::bf16::from_f32(0.5).to_le_bytes(),
        );
        assert_eq!(h, half::bf16::from_f32(1.5).to_le_bytes());
    }

    #[test]
    fn buffer_sizes_follow_the_collective() {
        let c = 8;
        assert_eq!(Collective::AllGather.recv_bytes(c, CollDtype::F32, 4), 128);
        assert_eq!(
            Collective::ReduceScatter(ReduceOp::Sum).send_bytes(c, CollDtype::F32, 4),
            128
        );
        assert_eq!(
            Collective::Send { peer: 1 }.recv_bytes(c, CollDtype::Bf16, 2),
            0
        );
        assert_eq!(
            Collective::Recv { peer: 0 }.send_bytes(c, CollDtype::Bf16, 2),
            0
        );
    }
}
