//! The codec against bincode: its own room, as the tests cross every other room.

use super::super::call::{
    Arg, ArgBytes, Args, BlobId, BufferId, Call, DevAddr, KernelId, LaunchHead, Ret, SiteId,
    StreamId, StreamRef, Value,
};
use super::super::frame::{Begin, End, Frame};
use super::*;
use serde::Serialize;
use std::collections::BTreeMap;

fn same<T: Serialize + std::fmt::Debug>(v: &T) {
    assert_eq!(
        encode_to_vec(v).unwrap(),
        encode_with_bincode(v).unwrap(),
        "{v:?}"
    );
}

/// Around every varint boundary, for every integer width, signed and unsigned.
#[test]
fn integers_encode_as_bincode_does() {
    let edges: [u128; 12] = [
        0,
        1,
        250,
        251,
        255,
        256,
        65_535,
        65_536,
        u32::MAX as u128,
        u32::MAX as u128 + 1,
        u64::MAX as u128,
        u64::MAX as u128 + 1,
    ];
    for e in edges {
        same(&(e as u8));
        same(&(e as u16));
        same(&(e as u32));
        same(&(e as u64));
        same(&e);
        same(&(e as usize));
        for s in [e as i128, -(e as i128), -(e as i128) - 1] {
            same(&(s as i8));
            same(&(s as i16));
            same(&(s as i32));
            same(&(s as i64));
            same(&s);
        }
    }
    same(&i64::MIN);
    same(&i128::MIN);
    same(&u128::MAX);
}

#[derive(Serialize, Debug)]
enum E {
    Unit,
    New(u32),
    Tuple(i16, char),
    Struct { a: Option<u64>, b: Vec<String> },
}

#[derive(Serialize, Debug)]
struct Everything {
    flag: bool,
    f: f32,
    d: f64,
    c: char,
    s: String,
    bytes: serde_bytes_like::Bytes,
    arr: [u8; 5],
    tuple: (u16, i32),
    list: Vec<E>,
    map: BTreeMap<String, u32>,
    none: Option<u8>,
    unit: (),
}

mod serde_bytes_like {
    #[derive(Debug)]
    pub struct Bytes(pub Vec<u8>);
    impl serde::Serialize for Bytes {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(&self.0)
        }
    }
}

#[test]
fn every_serde_shape_encodes_as_bincode_does() {
    let v = Everything {
        flag: true,
        f: -1.5,
        d: std::f64::consts::PI,
        c: 'é',
        s: "héllo".repeat(80),
        bytes: serde_bytes_like::Bytes((0..300u32).map(|i| i as u8).collect()),
        arr: [1, 2, 3, 250, 255],
        tuple: (70_000u32 as u16, -70_000),
        list: vec![
            E::Unit,
            E::New(300),
            E::Tuple(-2, '\u{1F980}'),
            E::Struct {
                a: Some(1 << 40),
                b: vec!["x".into(), String::new()],
            },
        ],
        map: [("a".to_string(), 1), ("b".to_string(), 70_000)].into(),
        none: None,
        unit: (),
    };
    same(&v);
}

fn edges() -> impl Iterator<Item = u64> {
    [
        0u64,
        250,
        251,
        65_535,
        65_536,
        u32::MAX as u64,
        u32::MAX as u64 + 1,
        u64::MAX,
    ]
    .into_iter()
}

fn every_arg() -> Vec<Arg> {
    let mut v = vec![
        Arg::Buf(DevAddr::Null),
        Arg::Buf(DevAddr::Unknown { near: None }),
    ];
    for (id, off) in [(0u32, 0u64), (251, 65_536), (u32::MAX, u64::MAX)] {
        let buf = BufferId(id);
        v.push(Arg::Buf(DevAddr::Buf { buf, off }));
        v.push(Arg::Buf(DevAddr::Freed { buf, off }));
        v.push(Arg::Buf(DevAddr::Unknown {
            near: Some((buf, off)),
        }));
    }
    for len in [0usize, 4, 8, 9, 300] {
        v.push(Arg::Val(ArgBytes::from(&vec![0xa5u8; len][..])));
    }
    v
}

/// The hand-written launch Begin against bincode's encoding of the `Frame` it stands for,
/// and back through both decoders, at every varint boundary and with every argument shape.
#[test]
fn launch_begin_by_hand_is_bincodes_frame() {
    let all = every_arg();
    let mut n = 0;
    for (k, e) in edges().enumerate() {
        let small = e.min(u32::MAX as u64) as u32;
        for typed in [false, true] {
            for stream in [StreamRef::Legacy, StreamRef::Id(StreamId(small))] {
                let args: Args = all.iter().skip(k % 3).cloned().collect();
                let (seq, t_ns) = (e, e.rotate_left(k as u32));
                let (kernel, grid, block, shared_mem) =
                    (KernelId(small), [small, 1, 251], [32, small, 65_536], small);
                let head = LaunchHead {
                    kernel,
                    grid,
                    block,
                    shared_mem,
                    stream,
                };
                let call = Call::new_launch(typed, head, args);
                let begin = Begin {
                    seq,
                    thread: e as u16,
                    site: SiteId(small),
                    t_ns,
                    call,
                };
                let mut ours = Vec::new();
                let (head, view) = begin.launch_parts().expect("a launch");
                append_launch_begin(&head, &view, &mut ours);
                let frame = Frame::Begin(begin.clone());
                assert_eq!(ours, encode_with_bincode(&frame).unwrap(), "{frame:?}");
                let mut into = Frame::Stop;
                assert!(hot::decode_into(&ours, &mut into));
                assert_eq!(into, frame);
                assert_eq!(decode_with_bincode(&ours).unwrap(), frame);
                n += 1;
            }
        }
    }
    assert_eq!(n, 32);
}

#[test]
fn end_by_hand_is_bincodes_frame() {
    let rets: Vec<Ret> = vec![
        Ok(Value::Unit),
        Ok(Value::Count(70_000)),
        Ok(Value::Stream(StreamRef::Id(StreamId(3)))),
        Err(super::super::call::ErrorRec {
            code: Some(700),
            message: "an illegal memory access was encountered".into(),
        }),
    ];
    for e in edges() {
        for ret in &rets {
            let mut ours = Vec::new();
            append_end(e, e / 3, ret, &mut ours).unwrap();
            let frame = Frame::End(End {
                seq: e,
                dur_ns: e / 3,
                ret: ret.clone(),
            });
            assert_eq!(ours, encode_with_bincode(&frame).unwrap(), "{frame:?}");
            assert_eq!(decode(&ours).unwrap(), frame);
            // Only the unit result takes the fast path; the rest are serde's.
            assert_eq!(
                hot::decode_into(&ours, &mut Frame::Stop),
                *ret == Ok(Value::Unit)
            );
        }
    }
}

/// Every one-byte change and every cut of hot records: the decoder gives bincode's value
/// or, where bincode refuses the bytes, an error.
#[test]
fn damaged_hot_records_decode_as_bincode_does() {
    // Every argument shape, with value bytes cut to 9 to keep the record short.
    let args: Args = every_arg()
        .into_iter()
        .map(|a| match a {
            Arg::Val(b) => Arg::Val(ArgBytes::from(&b[..b.len().min(9)])),
            other => other,
        })
        .collect();
    let launch = Begin {
        seq: 1 << 33,
        thread: 1,
        site: SiteId(300),
        t_ns: 12_345,
        call: Call::new_launch(
            true,
            LaunchHead {
                kernel: KernelId(2),
                grid: [1, 1, 1],
                block: [256, 1, 1],
                shared_mem: 0,
                stream: StreamRef::Id(StreamId(1)),
            },
            args,
        ),
    };
    let (head, view) = launch.launch_parts().expect("a launch");
    let mut begin = Vec::new();
    append_launch_begin(&head, &view, &mut begin);
    let mut end = Vec::new();
    append_end(70_000, 251, &Ok(Value::Unit), &mut end).unwrap();
    let mut checked = 0;
    for rec in [begin, end] {
        let mut variants: Vec<Vec<u8>> = (0..rec.len()).map(|n| rec[..n].to_vec()).collect();
        for i in 0..rec.len() {
            for b in [0u8, 1, 2, 3, 7, 8, 250, 251, 252, 253, 254, 255] {
                let mut m = rec.clone();
                m[i] = b;
                variants.push(m);
            }
        }
        for m in variants {
            match decode_with_bincode(&m) {
                Ok(f) => assert_eq!(decode(&m).unwrap(), f, "{m:?}"),
                Err(_) => assert!(decode(&m).is_err(), "{m:?}"),
            }
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked}");
}

#[test]
fn blob_records_by_hand_are_bincodes_and_their_head_reads_back() {
    for (len, zstd) in [
        (0usize, false),
        (3, true),
        (250, false),
        (251, false),
        (70_000, true),
    ] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let id = BlobId::of(&data);
        let frame = Frame::Blob {
            id,
            len: len as u64 + 5,
            zstd,
            data: data.clone(),
        };
        let mut by_hand = Vec::new();
        super::append_blob(id, len as u64 + 5, zstd, &data, &mut by_hand);
        assert_eq!(
            by_hand,
            super::encode_with_bincode(&frame).unwrap(),
            "len {len}"
        );
        assert_eq!(
            super::blob_head(&by_hand[..by_hand.len().min(64)]),
            Some((id, len as u64 + 5))
        );
        let (rid, rlen, rz, at) = super::blob_record(&by_hand).unwrap();
        assert_eq!(
            (rid, rlen, rz, &by_hand[at]),
            (id, len as u64 + 5, zstd, &data[..])
        );
        assert_eq!(super::blob_record(&by_hand[..by_hand.len() - 1]), None);
    }
    // Any other record has no blob head.
    let stop = super::encode_with_bincode(&Frame::Stop).unwrap();
    assert_eq!(super::blob_head(&stop), None);
}
