//! The examples an engine author copies from build (cargo builds them with the tests) and run
//! on the mock to a clean exit.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/NAME`, beside this test's own binary.
fn example(name: &str) -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let profile = me.parent().and_then(|d| d.parent()).unwrap();
    profile.join("examples").join(name)
}

#[test]
fn the_examples_run_on_the_mock() {
    for (name, expect) in [
        ("record_your_engine", "recorded"),
        ("flight_recorder", "REPRODUCED"),
        ("snapshot_test", "as a failure reads: [at-most-launches]"),
    ] {
        let p = example(name);
        assert!(p.exists(), "{} is built with the tests", p.display());
        let dir = std::env::temp_dir().join(format!("gputape-ex-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let o = Command::new(&p)
            .env_remove("GPUTAPE_FLIGHT")
            .env("GPUTAPE_RECORD", dir.join("engine.gtape"))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{name}: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains(expect), "{name}: {out}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn the_engine_tape_example_is_the_whole_command_line() {
    let p = example("engine_tape");
    assert!(p.exists(), "{} is built with the tests", p.display());
    let o = Command::new(&p)
        .args(["replay", "traces/mock_two_streams.gtape"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("replayed"), "{out}");
    let o = Command::new(&p).arg("no-such-verb").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}
