//! The library's layering: which top-level modules each module may use (`crate::<module>`
//! paths in its code), read from the source; also the check that the graph has no cycle.
//!
//! The table below is the one `src/lib.rs` documents. Comments and the `#[cfg(test)] mod …`
//! blocks that end a file are not read: unit tests may use what they need (the cache's tests
//! use fedsim's object generator for realistic pods).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each module and the modules it may use, from the bottom up.
const ALLOWED: &[(&str, &[&str])] = &[
    ("config", &[]),
    ("telemetry", &[]),
    ("http", &[]),
    ("storage", &[]),
    ("pki", &["config"]),
    ("api", &["config", "http", "storage", "telemetry"]),
    ("cache", &["api", "config", "http", "pki", "storage", "telemetry"]),
    ("controllers", &["api", "config", "storage", "telemetry"]),
    ("fedsim", &["api", "config", "http", "pki", "storage", "telemetry"]),
    ("search", &["api", "cache", "config", "http", "pki", "storage", "telemetry"]),
    ("agent", &["api", "config", "http", "pki", "storage", "telemetry"]),
    ("server", &["agent", "api", "cache", "config", "controllers", "http", "pki", "search", "storage", "telemetry"]),
    ("cli", &["agent", "api", "config", "pki", "server"]),
];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level modules named by `crate::<m>` in the non-comment, non-test code of `text`.
fn used_modules(text: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") && lines[i + 1..].iter().find(|l| !l.trim().is_empty()).is_some_and(|l| l.trim_start().starts_with("mod ")) {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let code = match t.find("//") {
            Some(c) => &t[..c],
            None => t,
        };
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let name: String = rest[at + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.insert(name);
            }
            rest = &rest[at + 7..];
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeMap<String, String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut g: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (m, _) in ALLOWED {
        let mut files = Vec::new();
        let dir = src.join(m);
        if dir.is_dir() {
            rs_files(&dir, &mut files);
        }
        let single = src.join(format!("{m}.rs"));
        if single.is_file() {
            files.push(single);
        }
        assert!(!files.is_empty(), "module {m} has no source under src/");
        let deps = g.entry(m.to_string()).or_default();
        for f in files {
            for d in used_modules(&std::fs::read_to_string(&f).unwrap()) {
                if d != *m {
                    deps.entry(d).or_insert_with(|| f.strip_prefix(&src).unwrap().display().to_string());
                }
            }
        }
    }
    g
}

#[test]
fn every_top_level_module_is_in_the_table() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let declared: BTreeSet<&str> = lib.lines().filter_map(|l| l.trim().strip_prefix("pub mod ")).map(|l| l.trim_end_matches(';')).collect();
    let table: BTreeSet<&str> = ALLOWED.iter().map(|(m, _)| *m).collect();
    assert_eq!(declared, table, "src/lib.rs's modules and the layering table differ");
}

#[test]
fn modules_use_only_what_their_layer_allows() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED.iter().map(|(m, a)| (*m, a.iter().copied().collect())).collect();
    let mut bad = Vec::new();
    for (m, deps) in graph() {
        for (d, file) in deps {
            if !allowed[m.as_str()].contains(d.as_str()) {
                bad.push(format!("{m} uses crate::{d} (first in src/{file})"));
            }
        }
    }
    assert!(bad.is_empty(), "imports outside the layering of src/lib.rs:\n{}", bad.join("\n"));
}

#[test]
fn the_module_graph_has_no_cycle() {
    let g = graph();
    // depth-first search with colours; a grey node reached again closes a cycle
    fn visit(n: &str, g: &BTreeMap<String, BTreeMap<String, String>>, colour: &mut BTreeMap<String, u8>, path: &mut Vec<String>) -> Option<Vec<String>> {
        colour.insert(n.to_string(), 1);
        path.push(n.to_string());
        for d in g.get(n).map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
            match colour.get(&d).copied().unwrap_or(0) {
                1 => {
                    let at = path.iter().position(|p| *p == d).unwrap();
                    let mut cycle = path[at..].to_vec();
                    cycle.push(d);
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(&d, g, colour, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        colour.insert(n.to_string(), 2);
        None
    }
    let mut colour = BTreeMap::new();
    for n in g.keys() {
        if colour.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, &g, &mut colour, &mut Vec::new()) {
                panic!("import cycle between modules: {}", c.join(" → "));
            }
        }
    }
}

#[test]
fn the_reader_sees_code_and_skips_comments_and_test_modules() {
    let text = "use crate::api::x;\n// crate::server is only named here\nlet a = crate::cache::y; // crate::search\n#[cfg(test)]\nmod tests {\n    use crate::fedsim::z;\n}\n";
    let got: Vec<String> = used_modules(text).into_iter().collect();
    assert_eq!(got, ["api", "cache"]);
}
