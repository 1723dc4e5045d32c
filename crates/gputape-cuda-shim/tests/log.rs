//! The call log (`GPUTAPE_SHIM_LOG_DIR`): a C program linked against libcuda
//! (`support/c/records.c`) runs with the shim in front of the fake driver, and its log holds
//! each understood call with its arguments, results and bytes, in order; the async read back's
//! bytes are those the sync delivered; the call the shim does not understand is there by name.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;

use std::process::Command;

use gputape_shimlog::{On, Reader, Rec};
use support::{fake_driver, records_program, scratch, shim};

#[test]
fn a_program_s_calls_are_logged_in_order_with_their_bytes() {
    let d = scratch("log");
    let prog = records_program(&d);
    let libdir = d.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    std::os::unix::fs::symlink(shim(), libdir.join("libcuda.so.1")).unwrap();
    let logs = d.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let o = Command::new(&prog)
        .env("LD_LIBRARY_PATH", &libdir)
        .env("GPUTAPE_REAL_LIBCUDA", fake_driver())
        .env("GPUTAPE_SHIM_LOG_DIR", &logs)
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The kernel ran (15 = 5 * 3) and the read back arrived at the sync.
    assert!(out.contains("out[5] = 15, errors 0"), "{out}");

    let files: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = std::fs::read(&files[0]).unwrap();
    let (h, r) = Reader::new(&bytes).unwrap();
    assert_eq!(h.driver_version, 12345);
    let recs: Vec<_> = r.map(|r| r.unwrap()).collect();
    assert!(recs.iter().all(|r| r.status == 0 || r.status == i32::MIN));
    // The log begins with the wall clock at its time 0 (after 2020, before the record's own
    // reading of it ends), what lays two processes' logs on one clock.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    match &recs[0].call {
        Rec::WallClock { wall_ns } => assert!(
            (1_577_836_800_000_000_000..=now).contains(wall_ns),
            "{wall_ns}"
        ),
        other => panic!("the first record is {other:?}"),
    }
    // Each call made from main carries where in it (a native stack, named before its first use).
    assert!(
        recs.iter()
            .skip(1)
            .filter(|r| !matches!(r.call, Rec::NativeFrame { .. } | Rec::NativeStack { .. }))
            .all(|r| r.stack != gputape_shimlog::NO_STACK),
        "{recs:?}"
    );
    let calls: Vec<&Rec<'_>> = recs
        .iter()
        .skip(1)
        .map(|r| &r.call)
        .filter(|c| !matches!(c, Rec::NativeFrame { .. } | Rec::NativeStack { .. }))
        .collect();

    const BASE: u64 = 0xfa00_0000_0000;
    let x = BASE + 64;
    let floats = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let ramp: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let tripled: Vec<f32> = ramp.iter().map(|v| v * 3.0).collect();
    let Rec::Alloc { ptr: y, .. } = calls[1] else {
        panic!("{:?}", calls[1])
    };
    assert_eq!(
        calls[0],
        &Rec::Alloc {
            ptr: x,
            bytes: 64,
            managed: false
        }
    );
    let sync = On {
        stream: 0,
        sync: true,
    };
    assert_eq!(
        calls[2],
        &Rec::CopyH2D {
            dst: x,
            on: sync,
            data: &floats(&ramp)
        }
    );
    let Rec::ModuleLoad {
        handle: 0x40000,
        library: false,
        image,
    } = calls[3]
    else {
        panic!("{:?}", calls[3])
    };
    // PTX: the text with its NUL, found without a size.
    assert!(image.starts_with(b"//\n// scale") && image.ends_with(b"{ ret; }\n\0"));
    assert_eq!(
        calls[4],
        &Rec::Function {
            owner: 0x40000,
            library: false,
            handle: 0x5ca1e,
            name: b"scale"
        }
    );
    let Rec::StreamCreate { stream, flags: 1 } = *calls[5] else {
        panic!("{:?}", calls[5])
    };
    let mut params = x.to_le_bytes().to_vec();
    params.extend_from_slice(&16i32.to_le_bytes());
    params.extend_from_slice(&3.0f32.to_le_bytes());
    assert_eq!(
        calls[6],
        &Rec::Launch {
            func: 0x5ca1e,
            grid: [1, 1, 1],
            block: [16, 1, 1],
            shared_mem: 0,
            stream,
            cluster: [0; 3],
            layout: Some(vec![(0, 8), (8, 4), (12, 4)].into()),
            params: &params,
        }
    );
    assert_eq!(
        calls[7],
        &Rec::Memset {
            dst: *y,
            value: 0x0102_0304,
            elem: 4,
            count: 8,
            on: sync
        }
    );
    assert_eq!(
        calls[8],
        &Rec::CopyD2D {
            src: x + 8,
            dst: *y,
            len: 8,
            on: sync
        }
    );
    let Rec::CopyD2H {
        src,
        len: 64,
        data: b"",
        on,
        ..
    } = calls[9]
    else {
        panic!("{:?}", calls[9])
    };
    assert_eq!((*src, on.stream, on.sync), (x, stream, false));
    assert_eq!(
        calls[10],
        &Rec::Opaque {
            name: b"cuMemcpyAtoH_v2"
        }
    );
    assert_eq!(calls[11], &Rec::StreamSync { stream });
    // Read at the sync: the tripled values, which the fake delivers only then.
    assert_eq!(
        calls[12],
        &Rec::D2HBytes {
            // The copy's record index in the log (naming records count).
            copy: recs
                .iter()
                .position(|r| matches!(r.call, Rec::CopyD2H { .. }))
                .unwrap() as u64,
            data: &floats(&tripled)
        }
    );
    assert_eq!(calls[13], &Rec::Free { ptr: *y });
    assert_eq!(calls[14], &Rec::Free { ptr: x });
    assert_eq!(calls.len(), 15);
    // Times never go back.
    assert!(recs.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    let _ = std::fs::remove_dir_all(d);
}
