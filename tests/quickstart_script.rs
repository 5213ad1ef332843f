//! `scripts/quickstart.sh` checks its environment overrides before it installs, builds,
//! starts or stops anything: each bad value is named in one line and the script exits 2.
//!
//! The script runs from a copy in a temporary directory whose `scripts/deps.sh` (the
//! script's first step after the check) only prints a marker and exits 42, so a value the
//! check lets through shows as that marker, and nothing is ever built or started.

use std::path::Path;
use std::process::{Command, Output};

/// The overrides the script reads; each run starts with none of them set.
const OVERRIDES: &[&str] = &["FEDCTL_API_PORT", "FEDCTL_ETCD_PORT", "FEDCTL_MEMBERS", "FEDCTL_NODES", "FEDCTL_PODS_PER_NODE", "FEDCTL_PROFILE"];
const DEPS_MARKER: &str = "quickstart reached deps.sh";
const DEPS_STATUS: i32 = 42;

/// A copy of the script in `dir/scripts/`, beside a `deps.sh` that stops it.
fn copy_script(dir: &Path) {
    let scripts = dir.join("scripts");
    std::fs::create_dir(&scripts).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/quickstart.sh");
    std::fs::copy(src, scripts.join("quickstart.sh")).unwrap();
    let deps = scripts.join("deps.sh");
    std::fs::write(&deps, format!("#!/bin/sh\necho '{DEPS_MARKER}'\nexit {DEPS_STATUS}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&deps, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs the copied script with `args` and `env` (on top of no overrides); returns its output
/// (whether it built or started anything is read from the directory afterwards, see
/// [`assert_untouched`]).
fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(dir.join("scripts/quickstart.sh")).args(args).current_dir(dir);
    for v in OVERRIDES {
        cmd.env_remove(v);
    }
    // a build would go here; the checks below find it still absent
    cmd.env("CARGO_TARGET_DIR", dir.join("target"));
    cmd.envs(env.iter().copied());
    cmd.output().expect("run bash")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Nothing but the copied scripts is in `dir`: no state directory, no build.
fn assert_untouched(dir: &Path, what: &str) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    entries.sort();
    assert_eq!(entries, ["scripts"], "{what}: created {entries:?}");
}

#[test]
fn bad_overrides_stop_it_before_anything_starts() {
    let long = "a".repeat(55); // fed-exec-<name> would be 64 characters
    let cases: &[(&str, &str)] = &[
        ("FEDCTL_API_PORT", "abc"),
        ("FEDCTL_API_PORT", "0"),
        ("FEDCTL_API_PORT", "65536"),
        ("FEDCTL_API_PORT", "23792"), // etcd's second port with the default FEDCTL_ETCD_PORT
        ("FEDCTL_API_PORT", ""),
        ("FEDCTL_ETCD_PORT", "abc"),
        ("FEDCTL_ETCD_PORT", "65535"), // the port after it would be 65536
        ("FEDCTL_ETCD_PORT", "08"),
        ("FEDCTL_ETCD_PORT", "-1"),
        ("FEDCTL_MEMBERS", "Bad_Name"),
        ("FEDCTL_MEMBERS", ""),
        ("FEDCTL_MEMBERS", "   "),
        ("FEDCTL_MEMBERS", "member-a member-b member-a"),
        ("FEDCTL_MEMBERS", "member-a -b"),
        ("FEDCTL_MEMBERS", "member-a b."),
        ("FEDCTL_MEMBERS", &long),
        ("FEDCTL_NODES", "0"),
        ("FEDCTL_NODES", "ten"),
        ("FEDCTL_PODS_PER_NODE", "-3"),
        ("FEDCTL_PODS_PER_NODE", "1.5"),
        ("FEDCTL_PROFILE", "bench"),
        ("FEDCTL_PROFILE", ""),
    ];
    for &(var, value) in cases {
        let dir = tempfile::tempdir().unwrap();
        copy_script(dir.path());
        let out = run(dir.path(), &[], &[(var, value)]);
        let (stdout, stderr) = text(&out);
        let what = format!("{var}={value:?}");
        assert_eq!(out.status.code(), Some(2), "{what}: stdout {stdout:?} stderr {stderr:?}");
        assert!(!stdout.contains(DEPS_MARKER), "{what}: went on to deps.sh: {stdout:?}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: want one line, got {stderr:?}");
        assert!(lines[0].starts_with(&format!("{var}=\"{value}\" is not accepted: ")), "{what}: {stderr:?}");
        assert!(lines[0].contains(": want "), "{what}: says not what is accepted: {stderr:?}");
        assert_untouched(dir.path(), &what);
    }
}

#[test]
fn every_bad_override_is_named() {
    let dir = tempfile::tempdir().unwrap();
    copy_script(dir.path());
    let env = [("FEDCTL_API_PORT", "x"), ("FEDCTL_ETCD_PORT", "y"), ("FEDCTL_MEMBERS", "A"), ("FEDCTL_NODES", "0"), ("FEDCTL_PODS_PER_NODE", "0"), ("FEDCTL_PROFILE", "z")];
    let out = run(dir.path(), &[], &env);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let named: Vec<&str> = stderr.lines().map(|l| l.split('=').next().unwrap()).collect();
    assert_eq!(named, OVERRIDES, "{stderr}");
    assert_untouched(dir.path(), "all bad");
}

#[test]
fn good_overrides_pass_the_check() {
    let longest = "a".repeat(54);
    let cases: &[&[(&str, &str)]] = &[
        &[],
        &[("FEDCTL_ETCD_PORT", "65534"), ("FEDCTL_API_PORT", "65533")],
        &[("FEDCTL_ETCD_PORT", "1"), ("FEDCTL_API_PORT", "65535")],
        &[("FEDCTL_MEMBERS", &longest)],
        &[("FEDCTL_MEMBERS", " east-1\twest-2\n0a ")],
        &[("FEDCTL_NODES", "1"), ("FEDCTL_PODS_PER_NODE", "110"), ("FEDCTL_PROFILE", "dev")],
        &[("FEDCTL_PROFILE", "release")],
    ];
    for env in cases {
        let dir = tempfile::tempdir().unwrap();
        copy_script(dir.path());
        let out = run(dir.path(), &[], env);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(DEPS_STATUS), "{env:?}: stdout {stdout:?} stderr {stderr:?}");
        assert!(stdout.contains(DEPS_MARKER), "{env:?}: {stdout:?}");
        assert!(stderr.is_empty(), "{env:?}: {stderr:?}");
        assert_untouched(dir.path(), &format!("{env:?}"));
    }
}

/// `down` stops by pid files; the overrides play no part in it, so a bad one does not stop it.
#[test]
fn down_ignores_the_overrides() {
    let dir = tempfile::tempdir().unwrap();
    copy_script(dir.path());
    let out = run(dir.path(), &["down"], &[("FEDCTL_ETCD_PORT", "abc"), ("FEDCTL_MEMBERS", "")]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "stdout {stdout:?} stderr {stderr:?}");
    assert_eq!(stdout.trim(), "nothing to stop");
    assert_untouched(dir.path(), "down");
}

/// One argument at most: an extra one (`up --help`, `down --force`) is refused before anything
/// runs, rather than ignored (`up --help` would otherwise build and start the federation).
#[test]
fn extra_arguments_are_refused() {
    for args in [&["up", "--help"][..], &["up", "extra"], &["down", "--force"], &["--help", "x"]] {
        let dir = tempfile::tempdir().unwrap();
        copy_script(dir.path());
        let out = run(dir.path(), args, &[]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: stdout {stdout:?} stderr {stderr:?}");
        assert!(stderr.lines().next().is_some_and(|l| l.contains(args[1])), "{args:?}: {stderr:?}");
        assert!(!stdout.contains(DEPS_MARKER), "{args:?}: {stdout:?}");
        assert_untouched(dir.path(), &format!("{args:?}"));
    }
}
