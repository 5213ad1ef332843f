//! `fedctl-bench compare`: runs one benchmark alternately with a baseline build's binaries and
//! with this build's, and prints the medians of every figure side by side with their ratio.
//!
//! Each round runs `<baseline-dir>/fedctl-bench <args>` and then this binary with the same
//! args (each bench starts the `fedctl`/`fedsim` binaries beside its own executable, so each
//! side measures its own build). Figures are read from the Markdown table rows the benches
//! print (`| row | cell | … |`): every number of every cell, keyed by row, column header and
//! the cell's text around the number, so any bench that prints tables can be compared.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Parser;

/// Arguments of `fedctl-bench compare`.
#[derive(Parser)]
pub struct Args {
    /// Directory holding the baseline build's `fedctl-bench`, `fedctl` and `fedsim`.
    #[arg(long)]
    baseline: PathBuf,
    /// Rounds; each round runs the baseline, then this build (medians over rounds).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory for each run's full output (`baseline-<round>.txt`, `this-<round>.txt`).
    #[arg(long, default_value = "bench-compare")]
    out: PathBuf,
    /// The benchmark and its arguments, after `--`: e.g. `-- server --objects 10000`.
    #[arg(last = true, required = true)]
    bench: Vec<String>,
}

/// One figure's key: (row label, column header, the cell's text with the number as `{}`).
type Key = (String, String, String);

/// Runs the rounds and prints a Markdown table of medians and ratios; errors name the run
/// that failed (exit code or spawn error) and where its output is.
pub async fn run(a: Args) -> Result<(), String> {
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let this = std::env::current_exe().map_err(|e| e.to_string())?;
    let base = a.baseline.join("fedctl-bench");
    let mut figures: BTreeMap<Key, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut order: Vec<Key> = Vec::new();
    for round in 0..a.rounds {
        for (side, exe) in [("baseline", &base), ("this", &this)] {
            let file = a.out.join(format!("{side}-{round}.txt"));
            eprintln!("round {}/{}: {side} ({})", round + 1, a.rounds, exe.display());
            let out = tokio::process::Command::new(exe).args(&a.bench).output().await.map_err(|e| format!("{}: {e}", exe.display()))?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            std::fs::write(&file, format!("{text}\n--- stderr ---\n{}", String::from_utf8_lossy(&out.stderr))).map_err(|e| format!("{}: {e}", file.display()))?;
            if !out.status.success() {
                return Err(format!("{side} run {} failed ({}); output in {}", round + 1, out.status, file.display()));
            }
            for (key, v) in table_figures(&text) {
                if !figures.contains_key(&key) {
                    order.push(key.clone());
                }
                let e = figures.entry(key).or_default();
                if side == "baseline" {
                    e.0.push(v)
                } else {
                    e.1.push(v)
                }
            }
        }
    }
    println!("fedctl-bench compare: {} rounds of `{}`; baseline {}", a.rounds, a.bench.join(" "), a.baseline.display());
    println!();
    println!("| row | column | figure | baseline (median) | this build (median) | this/baseline |");
    println!("|---|---|---|---:|---:|---:|");
    for key in order {
        let (b, t) = &figures[&key];
        let (Some(bm), Some(tm)) = (median(b), median(t)) else { continue };
        let ratio = if bm != 0.0 { format!("{:.2}×", tm / bm) } else { "—".into() };
        println!("| {} | {} | {} | {} | {} | {ratio} |", key.0, key.1, key.2, fmt(bm), fmt(tm));
    }
    Ok(())
}

fn fmt(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Median of a sample; `None` when empty.
fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    Some(if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 })
}

/// Every number in the body rows of every Markdown table in `text`, keyed by row label
/// (first cell), column header, and the cell part around it (split on `, `) with that number
/// replaced by `{}` and the part's other numbers by `#` (so a part with several figures that
/// vary from run to run, `# MiB in {} s`, keeps one key per figure). The row label's own
/// numbers stay part of the label.
fn table_figures(text: &str) -> Vec<(Key, f64)> {
    let mut out = Vec::new();
    let mut header: Vec<String> = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let l = line.trim();
        if !(l.starts_with('|') && l.ends_with('|') && l.len() > 1) {
            in_table = false;
            continue;
        }
        let cells: Vec<String> = l[1..l.len() - 1].split('|').map(|c| c.trim().to_string()).collect();
        if !in_table {
            header = cells;
            in_table = true;
            continue;
        }
        if cells.iter().all(|c| c.chars().all(|ch| matches!(ch, '-' | ':'))) {
            continue;
        }
        let row = cells[0].clone();
        for (i, cell) in cells.iter().enumerate().skip(1) {
            let col = header.get(i).cloned().unwrap_or_else(|| format!("column {i}"));
            for part in cell.split(", ") {
                let found = numbers(part);
                for (k, &(_, _, v)) in found.iter().enumerate() {
                    let mut template = String::new();
                    let mut at = 0;
                    for (j, &(start, end, _)) in found.iter().enumerate() {
                        template.push_str(&part[at..start]);
                        template.push_str(if j == k { "{}" } else { "#" });
                        at = end;
                    }
                    template.push_str(&part[at..]);
                    out.push(((row.clone(), col.clone(), template), v));
                }
            }
        }
    }
    out
}

/// Every decimal number in `s` that starts a word (digits with an optional fraction; the
/// digits of `p50` or `v1` are part of a name): its byte range and value.
fn numbers(s: &str) -> Vec<(usize, usize, f64)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !(b[i].is_ascii_digit() && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'.'))) {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < b.len() && (b[end].is_ascii_digit() || (b[end] == b'.' && end + 1 < b.len() && b[end + 1].is_ascii_digit())) {
            end += 1;
        }
        if let Ok(v) = s[i..end].parse() {
            out.push((i, end, v));
        }
        // the rest of a word that goes on after the digits (`2x`, `4k`) is no number
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_figure_of_a_table() {
        let t = "intro\n\n| operation | fedctl | etcd direct |\n|---|---:|---:|\n| create (10 ops) | 1207/s, p50 24.35 ms | 4355/s |\n\nafter\n";
        let f = table_figures(t);
        assert_eq!(f.len(), 3);
        assert_eq!(f[0], (("create (10 ops)".into(), "fedctl".into(), "{}/s".into()), 1207.0));
        assert_eq!(f[1], (("create (10 ops)".into(), "fedctl".into(), "p50 {} ms".into()), 24.35));
        assert_eq!(f[2].0 .1, "etcd direct");
    }

    /// A cell with several figures that vary between runs keeps one key per figure, the same
    /// in every run, so each gets its median.
    #[test]
    fn every_figure_of_a_cell_keeps_its_key_across_runs() {
        let run = |secs: &str, mib: &str| format!("| figure | value |\n|---|---|\n| whole-view LIST | 1000000 pods, 5149 MiB in {secs} s; server +{mib} MiB (p99 of v1) |\n");
        let (a, b) = (table_figures(&run("19.8", "136")), table_figures(&run("24.1", "102")));
        let keys = |f: &[(Key, f64)]| f.iter().map(|(k, _)| k.2.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&a), vec!["{} pods", "{} MiB in # s; server +# MiB (p99 of v1)", "# MiB in {} s; server +# MiB (p99 of v1)", "# MiB in # s; server +{} MiB (p99 of v1)"]);
        assert_eq!(keys(&a), keys(&b));
        assert_eq!((a[2].1, b[2].1, a[3].1, b[3].1), (19.8, 24.1, 136.0, 102.0));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
