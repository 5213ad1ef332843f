//! YAML config files for the modes' flags, k3s-style: a mapping whose keys are long flag names
//! (`etcd-servers: [http://10.0.0.1:2379]`, `secure-port: 6443`); uses no other fedctl module.
//!
//! Precedence, as in k3s: a flag on the command line wins over its `FEDCTL_*` environment
//! variable, which wins over the file, which wins over the flag's default. The file only fills
//! flags that the command line and the environment left unset: [`to_args`] turns its entries
//! into `--key=value` arguments for them.

use std::path::{Path, PathBuf};

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is no YAML mapping of flag names to scalars or lists of scalars.
    #[error("config file {}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key when one is at fault.
        message: String,
    },
}

/// One entry of a config file: a long flag name (without `--`) and its values (a list holds
/// several; `true` is a bare switch, `false` leaves the flag out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The flag's long name, e.g. `etcd-servers`.
    pub key: String,
    /// Its values as the command line would spell them; empty for a switch.
    pub values: Vec<String>,
    /// `false` for `key: false` (the flag stays unset).
    pub enabled: bool,
}

/// Reads the config file at `path`: an empty file is no entries.
/// Errors: [`FileError::Read`]; [`FileError::Invalid`] for anything but a mapping of names to
/// strings, numbers, booleans or lists of those.
pub fn load(path: &Path) -> Result<Vec<Entry>, FileError> {
    let text = std::fs::read_to_string(path).map_err(|source| FileError::Read { path: path.to_path_buf(), source })?;
    parse(&text).map_err(|message| FileError::Invalid { path: path.to_path_buf(), message })
}

/// Parses a config file's text (see [`load`]); the error says what is wrong.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    super::yaml::check_yaml_nesting(text)?;
    let doc: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    let map = match doc {
        serde_yaml::Value::Null => return Ok(Vec::new()),
        serde_yaml::Value::Mapping(m) => m,
        _ => return Err("want a mapping of flag names to values".into()),
    };
    let scalar = |key: &str, v: &serde_yaml::Value| -> Result<String, String> {
        match v {
            serde_yaml::Value::String(s) => Ok(s.clone()),
            serde_yaml::Value::Number(n) => Ok(n.to_string()),
            serde_yaml::Value::Bool(b) => Ok(b.to_string()),
            _ => Err(format!("{key}: want a string, number, boolean or a list of those")),
        }
    };
    let mut out = Vec::with_capacity(map.len());
    for (k, v) in &map {
        let serde_yaml::Value::String(key) = k else { return Err(format!("key {k:?} is not a flag name")) };
        let key = key.trim_start_matches("--").to_string();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
            return Err(format!("key {key:?} is not a flag name (lower-case letters, digits and '-')"));
        }
        let entry = match v {
            serde_yaml::Value::Bool(b) => Entry { key, values: Vec::new(), enabled: *b },
            serde_yaml::Value::Sequence(items) => {
                let values = items.iter().map(|i| scalar(&key, i)).collect::<Result<Vec<_>, _>>()?;
                Entry { key, values, enabled: true }
            }
            other => {
                let value = scalar(&key, other)?;
                Entry { key, values: vec![value], enabled: true }
            }
        };
        out.push(entry);
    }
    Ok(out)
}

/// The command-line arguments that put `entries` into effect: `--key=value` (a list as one
/// comma-separated value, as the modes' list flags take them) or `--key` for a switch, for every
/// entry whose flag `is_set` says the command line or environment has not set already.
pub fn to_args(entries: &[Entry], is_set: impl Fn(&str) -> bool) -> Vec<String> {
    let mut args = Vec::new();
    for e in entries.iter().filter(|e| e.enabled && !is_set(&e.key)) {
        if e.values.is_empty() {
            args.push(format!("--{}", e.key));
        } else {
            args.push(format!("--{}={}", e.key, e.values.join(",")));
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_become_arguments_for_unset_flags_only() {
        let entries = parse("etcd-servers: [http://a:2379, http://b:2379]\nsecure-port: 7443\nforce: true\nquiet: false\n").unwrap();
        assert_eq!(entries.len(), 4);
        let args = to_args(&entries, |k| k == "secure-port");
        assert_eq!(args, vec!["--etcd-servers=http://a:2379,http://b:2379".to_string(), "--force".to_string()]);
        assert_eq!(parse("").unwrap(), Vec::new());
    }

    #[test]
    fn bad_files_are_refused_with_the_key() {
        assert!(parse("- a\n- b\n").unwrap_err().contains("mapping"));
        assert!(parse("tls-san: {a: b}\n").unwrap_err().contains("tls-san"));
        assert!(parse("Bad_Key: 1\n").unwrap_err().contains("Bad_Key"));
        assert!(parse("a: [[1]]\n").unwrap_err().contains("a:"));
        let e = load(Path::new("/nonexistent/fedctl.yaml")).unwrap_err();
        assert!(matches!(e, FileError::Read { .. }), "{e}");
    }
}
