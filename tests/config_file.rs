//! Flags from a YAML config file and `FEDCTL_*` variables: the command line wins over the
//! environment, the environment over the file, the file over the default (as in k3s).

use std::process::Command;

/// Runs `fedctl cache` with `args`, `env` and a config file holding `file`, where every value
/// picks an invalid shard so that the process stops at once with an error naming the shard
/// count in effect; returns that error line.
fn cache_error(file: &str, env: &[(&str, &str)], args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.yaml");
    std::fs::write(&path, file).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fedctl"));
    cmd.arg("cache").arg("--config").arg(&path).args(args);
    for v in ["FEDCTL_SHARD_COUNT", "FEDCTL_SHARDS", "FEDCTL_CONFIG", "FEDCTL_LISTEN"] {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run fedctl cache");
    assert!(!out.status.success(), "fedctl cache with shard 9 must fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn flag_beats_env_beats_file_beats_default() {
    // --shards comes from the file (a required flag may), --shard-count from each source in turn
    let file = "shards: [9]\nshard-count: 5\n";
    let e = cache_error(file, &[("FEDCTL_SHARD_COUNT", "6")], &["--shard-count", "7"]);
    assert!(e.contains("below --shard-count 7, got [9]"), "flag wins: {e}");
    let e = cache_error(file, &[("FEDCTL_SHARD_COUNT", "6")], &[]);
    assert!(e.contains("below --shard-count 6, got [9]"), "env beats the file: {e}");
    let e = cache_error(file, &[], &[]);
    assert!(e.contains("below --shard-count 5, got [9]"), "the file beats the default: {e}");
    let e = cache_error("shards: [9]\n", &[], &[]);
    assert!(e.contains("below --shard-count 4, got [9]"), "the default (4) last: {e}");
    // a flag on the command line also beats the file for a list flag
    let e = cache_error(file, &[], &["--shards", "8"]);
    assert!(e.contains("got [8]"), "{e}");
}

#[test]
fn bad_config_files_are_refused() {
    let e = cache_error("shards: {a: 1}\n", &[], &[]);
    assert!(e.contains("config file") && e.contains("shards"), "{e}");
    let e = cache_error("no-such-flag: 1\nshards: [9]\n", &[], &[]);
    assert!(e.contains("no-such-flag"), "an unknown key is named: {e}");
    let out = Command::new(env!("CARGO_BIN_EXE_fedctl")).args(["cache", "--config", "/nonexistent/cache.yaml", "--shards", "9"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/cache.yaml"));
}
