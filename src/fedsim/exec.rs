//! What runs inside fedsim's simulated containers for `exec`: a handful of built-in
//! commands over a small per-pod in-memory file system, enough for `kubectl exec` and
//! `kubectl cp` in both directions (`tar` via the tar crate). Uses no other fedctl module.
//!
//! Commands: `echo [-n] …`, `true`, `false`, `hostname` (the pod name), `env` (PATH,
//! HOSTNAME, the container's literal `env` values, HOME), `pwd`, `cat [file…]` (stdin
//! without files), `ls [path…]`, `test -d|-f|-e <path>`, `mkdir [-p] <dir…>`,
//! `sleep <seconds>`, `sh -c <script>` (`exit N`, or one command of the list above, with
//! shell quoting; a missing command is 127 as a shell reports it), `tar -x[m]f - [-C dir]`
//! (what `kubectl cp` to a pod runs, after `test -d <dest>`) and `tar cf - <path>` (from a
//! pod). A program that is not one of these fails to start, as runc reports a missing
//! executable: the OCI message on stdout and exit code 126. Each pod's files start as
//! `/etc/hostname`, `/etc/os-release`, `/etc/motd` and the empty directories `/tmp`,
//! `/root` and `/var/log`; the working directory is `/`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

/// Largest stdin `tar -x` reads (bytes); more is an error (exit 2).
pub const MAX_ARCHIVE_BYTES: usize = 64 << 20;

/// Errors of the file system (shown on stderr the way coreutils word them).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The path is not there.
    #[error("{0}: No such file or directory")]
    NotFound(String),
    /// A file where a directory is needed.
    #[error("{0}: Not a directory")]
    NotDir(String),
    /// A directory where a file is needed.
    #[error("{0}: Is a directory")]
    IsDir(String),
}

/// One node of a pod's file system.
#[derive(Clone, Debug)]
enum Node {
    Dir,
    File(Bytes),
}

/// One pod's files: absolute normalized path → node (`/` always a directory).
#[derive(Debug, Default)]
pub struct Fs {
    nodes: BTreeMap<String, Node>,
}

/// `path` made absolute against `/` and normalized (`.`, `..`, repeated slashes).
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

fn parent(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".into(),
        Some(i) => path[..i].to_string(),
    }
}

impl Fs {
    /// The files a simulated container starts with (see the module docs).
    pub fn seeded(pod: &str) -> Fs {
        let mut fs = Fs::default();
        for d in ["/", "/etc", "/tmp", "/root", "/var", "/var/log"] {
            fs.nodes.insert(d.into(), Node::Dir);
        }
        fs.nodes.insert("/etc/hostname".into(), Node::File(Bytes::from(format!("{pod}\n"))));
        fs.nodes.insert("/etc/os-release".into(), Node::File(Bytes::from_static(b"NAME=\"fedsim\"\nID=fedsim\nVERSION_ID=1\nPRETTY_NAME=\"fedsim simulated container\"\n")));
        fs.nodes.insert("/etc/motd".into(), Node::File(Bytes::from_static(b"a simulated container of fedsim\n")));
        fs
    }

    /// Whether `path` is a directory.
    pub fn is_dir(&self, path: &str) -> bool {
        matches!(self.nodes.get(&normalize(path)), Some(Node::Dir))
    }

    /// The contents of the file at `path`.
    pub fn read(&self, path: &str) -> Result<Bytes, FsError> {
        match self.nodes.get(&normalize(path)) {
            Some(Node::File(b)) => Ok(b.clone()),
            Some(Node::Dir) => Err(FsError::IsDir(path.into())),
            None => Err(FsError::NotFound(path.into())),
        }
    }

    /// Creates the directory `path` and its missing parents (`mkdir -p`).
    pub fn mkdir_all(&mut self, path: &str) -> Result<(), FsError> {
        let path = normalize(path);
        let mut cur = String::new();
        for p in path.split('/').filter(|p| !p.is_empty()) {
            cur.push('/');
            cur.push_str(p);
            match self.nodes.get(&cur) {
                Some(Node::Dir) => {}
                Some(Node::File(_)) => return Err(FsError::NotDir(cur)),
                None => {
                    self.nodes.insert(cur.clone(), Node::Dir);
                }
            }
        }
        Ok(())
    }

    /// Writes the file `path` (its directory must exist).
    pub fn write(&mut self, path: &str, data: Bytes) -> Result<(), FsError> {
        let path = normalize(path);
        if !self.is_dir(&parent(&path)) {
            return Err(FsError::NotFound(path));
        }
        if self.is_dir(&path) {
            return Err(FsError::IsDir(path));
        }
        self.nodes.insert(path, Node::File(data));
        Ok(())
    }

    /// Names directly under the directory `path`, sorted; a file lists itself.
    pub fn list(&self, path: &str) -> Result<Vec<String>, FsError> {
        let p = normalize(path);
        match self.nodes.get(&p) {
            None => Err(FsError::NotFound(path.into())),
            Some(Node::File(_)) => Ok(vec![path.to_string()]),
            Some(Node::Dir) => {
                let prefix = if p == "/" { "/".to_string() } else { format!("{p}/") };
                Ok(self
                    .nodes
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .filter(|(k, _)| !k[prefix.len()..].contains('/') && k.len() > prefix.len())
                    .map(|(k, _)| k[prefix.len()..].to_string())
                    .collect())
            }
        }
    }

    /// Every path at or under `path` (itself first), in order.
    fn subtree(&self, path: &str) -> Vec<(String, Node)> {
        let p = normalize(path);
        let prefix = if p == "/" { "/".to_string() } else { format!("{p}/") };
        let mut out: Vec<(String, Node)> = self.nodes.get(&p).map(|n| (p.clone(), n.clone())).into_iter().collect();
        out.extend(self.nodes.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).filter(|(k, _)| **k != p).map(|(k, n)| (k.clone(), n.clone())));
        out
    }
}

/// A pod's identity: namespace, name, uid.
type PodKey = (String, String, String);

/// Every simulated pod's files, keyed by namespace, name and uid (a recreated pod starts
/// afresh).
#[derive(Default)]
pub struct PodFiles {
    pods: Mutex<HashMap<PodKey, Arc<Mutex<Fs>>>>,
}

impl PodFiles {
    /// The files of pod `namespace/name` with `uid`, seeded on first use.
    pub fn of(&self, namespace: &str, name: &str, uid: &str) -> Arc<Mutex<Fs>> {
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        pods.entry((namespace.into(), name.into(), uid.into())).or_insert_with(|| Arc::new(Mutex::new(Fs::seeded(name)))).clone()
    }
}

/// What a command sees of its container.
#[derive(Clone, Debug)]
pub struct Container {
    /// The pod's name (the container's hostname).
    pub pod: String,
    /// The container's name.
    pub name: String,
    /// Its literal environment (`spec.containers[].env` entries with a `value`), in order.
    pub env: Vec<(String, String)>,
}

/// Channel numbers of a command's streams, as the remote-command protocols number them.
pub const STDOUT: u8 = 1;
/// See [`STDOUT`].
pub const STDERR: u8 = 2;

/// A command's standard streams: stdin chunks (`None` at end of input, or no stdin at all)
/// and one queue for stdout and stderr chunks tagged [`STDOUT`] / [`STDERR`].
pub struct Stdio {
    /// stdin; a closed channel is end of input.
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    /// stdout and stderr, in the order written.
    pub out: mpsc::Sender<(u8, Bytes)>,
}

impl Stdio {
    async fn write(&self, ch: u8, data: impl Into<Bytes>) {
        let _ = self.out.send((ch, data.into())).await;
    }

    async fn read_all(&mut self, max: usize) -> Result<Vec<u8>, ()> {
        let mut all = Vec::new();
        if let Some(rx) = &mut self.stdin {
            while let Some(b) = rx.recv().await {
                if all.len() + b.len() > max {
                    return Err(());
                }
                all.extend_from_slice(&b);
            }
        }
        Ok(all)
    }
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and exited with this code.
    Exited(i32),
}

/// Splits a shell word list: whitespace separates words, `'…'` and `"…"` quote (with `\`
/// escaping in double quotes and unquoted text). `None` for an unterminated quote.
pub fn shell_words(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => cur.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => cur.push(chars.next()?),
                        c => cur.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next()?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Some(out)
}

/// Runs `argv` in `container` over `fs` with `io`. A program that is not built in exits 126
/// with runc's message on stdout (see the module docs).
pub async fn run(container: &Container, fs: &Mutex<Fs>, argv: &[String], mut io: Stdio) -> Outcome {
    let Some(prog) = argv.first() else {
        io.write(STDOUT, "OCI runtime exec failed: exec failed: unable to start container process: exec: no command: unknown\r\n").await;
        return Outcome::Exited(126);
    };
    match builtin(container, fs, prog, &argv[1..], &mut io).await {
        Some(code) => Outcome::Exited(code),
        None => {
            io.write(STDOUT, format!("OCI runtime exec failed: exec failed: unable to start container process: exec: \"{prog}\": executable file not found in $PATH: unknown\r\n")).await;
            Outcome::Exited(126)
        }
    }
}

fn lock(fs: &Mutex<Fs>) -> std::sync::MutexGuard<'_, Fs> {
    fs.lock().unwrap_or_else(|e| e.into_inner())
}

/// One built-in; `None` when `prog` is not one.
async fn builtin(c: &Container, fs: &Mutex<Fs>, prog: &str, args: &[String], io: &mut Stdio) -> Option<i32> {
    let name = prog.rsplit('/').next().unwrap_or(prog);
    Some(match name {
        "true" => 0,
        "false" => 1,
        "echo" => {
            let (nl, words) = match args.first().map(String::as_str) {
                Some("-n") => (false, &args[1..]),
                _ => (true, args),
            };
            let mut s = words.join(" ");
            if nl {
                s.push('\n');
            }
            io.write(STDOUT, s).await;
            0
        }
        "hostname" => {
            io.write(STDOUT, format!("{}\n", c.pod)).await;
            0
        }
        "pwd" => {
            io.write(STDOUT, "/\n").await;
            0
        }
        "env" => {
            let mut s = format!("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nHOSTNAME={}\n", c.pod);
            for (k, v) in &c.env {
                s.push_str(&format!("{k}={v}\n"));
            }
            s.push_str("HOME=/root\n");
            io.write(STDOUT, s).await;
            0
        }
        "sleep" => {
            let secs: f64 = args.first().and_then(|a| a.parse().ok()).filter(|s: &f64| s.is_finite() && *s >= 0.0).unwrap_or(0.0);
            tokio::time::sleep(Duration::from_secs_f64(secs.min(3600.0))).await;
            0
        }
        "cat" => {
            if args.is_empty() {
                if let Some(rx) = &mut io.stdin {
                    while let Some(b) = rx.recv().await {
                        let _ = io.out.send((STDOUT, b)).await;
                    }
                }
                return Some(0);
            }
            let mut code = 0;
            for a in args {
                let r = lock(fs).read(a);
                match r {
                    Ok(b) => io.write(STDOUT, b).await,
                    Err(e) => {
                        io.write(STDERR, format!("cat: {e}\n")).await;
                        code = 1;
                    }
                }
            }
            code
        }
        "ls" => {
            let paths: Vec<String> = if args.is_empty() { vec!["/".into()] } else { args.iter().filter(|a| !a.starts_with('-')).cloned().collect() };
            let mut code = 0;
            for p in &paths {
                let r = lock(fs).list(p);
                match r {
                    Ok(names) => {
                        let mut s = String::new();
                        if paths.len() > 1 {
                            s.push_str(&format!("{p}:\n"));
                        }
                        for n in names {
                            s.push_str(&n);
                            s.push('\n');
                        }
                        io.write(STDOUT, s).await;
                    }
                    Err(_) => {
                        io.write(STDERR, format!("ls: cannot access '{p}': No such file or directory\n")).await;
                        code = 2;
                    }
                }
            }
            code
        }
        "test" | "[" => {
            let args: Vec<&str> = args.iter().map(String::as_str).filter(|a| *a != "]").collect();
            let f = lock(fs);
            match args.as_slice() {
                ["-d", p] => i32::from(!f.is_dir(p)),
                ["-f", p] => i32::from(f.read(p).is_err() || f.is_dir(p)),
                ["-e", p] => i32::from(!f.is_dir(p) && f.read(p).is_err()),
                [s] => i32::from(s.is_empty()),
                [] => 1,
                _ => 2,
            }
        }
        "mkdir" => {
            let mut code = 0;
            for a in args.iter().filter(|a| !a.starts_with('-')) {
                let r = lock(fs).mkdir_all(a);
                if let Err(e) = r {
                    io.write(STDERR, format!("mkdir: cannot create directory '{a}': {e}\n")).await;
                    code = 1;
                }
            }
            code
        }
        "sh" | "bash" => {
            let script = match args {
                [flag, script, ..] if flag == "-c" => script.clone(),
                _ => {
                    // an interactive shell: its input is the script
                    match io.read_all(1 << 20).await {
                        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                        Err(()) => return Some(2),
                    }
                }
            };
            return Some(Box::pin(shell(c, fs, name, &script, io)).await);
        }
        "tar" => tar(fs, args, io).await,
        _ => return None,
    })
}

/// `sh -c`: each line or `;`-separated command in turn (`exit N` ends the script), the
/// status of the last.
async fn shell(c: &Container, fs: &Mutex<Fs>, sh: &str, script: &str, io: &mut Stdio) -> i32 {
    let mut status = 0;
    for cmd in script.split(['\n', ';']).map(str::trim).filter(|s| !s.is_empty()) {
        let Some(words) = shell_words(cmd) else {
            io.write(STDERR, format!("{sh}: syntax error: unterminated quoted string\n")).await;
            return 2;
        };
        let Some(prog) = words.first() else { continue };
        if prog == "exit" {
            return words.get(1).and_then(|n| n.parse::<i32>().ok()).map_or(status, |n| n & 0xff);
        }
        status = match Box::pin(builtin(c, fs, prog, &words[1..], io)).await {
            Some(code) => code,
            None => {
                io.write(STDERR, format!("{sh}: {prog}: not found\n")).await;
                127
            }
        };
    }
    status
}

/// Extracts the tar archive `data` under `dir`: directories and regular files (others are
/// skipped), missing parents created. Returns the errors, worded as GNU tar does.
fn extract_archive(f: &mut Fs, dir: &str, data: &[u8]) -> Vec<String> {
    let mut errors = Vec::new();
    let mut archive = tar::Archive::new(data);
    let entries = match archive.entries() {
        Ok(e) => e,
        Err(e) => return vec![format!("tar: {e}")],
    };
    for entry in entries {
        let mut entry = match entry {
            Ok(e) => e,
            Err(e) => {
                errors.push(format!("tar: {e}"));
                break;
            }
        };
        let name = match entry.path() {
            Ok(p) => p.to_string_lossy().into_owned(),
            Err(_) => continue,
        };
        let target = normalize(&format!("{dir}/{name}"));
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            if let Err(e) = f.mkdir_all(&target) {
                errors.push(format!("tar: {e}"));
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let mut body = Vec::new();
        if let Err(e) = std::io::Read::read_to_end(&mut entry, &mut body) {
            errors.push(format!("tar: {name}: {e}"));
            break;
        }
        if let Err(e) = f.mkdir_all(&parent(&target)).and_then(|()| f.write(&target, Bytes::from(body))) {
            errors.push(format!("tar: {name}: Cannot open: {e}"));
        }
    }
    errors
}

/// `tar`: extraction from stdin (`-x`, with `-C dir`) and creation to stdout (`c` with
/// `f -`), the forms `kubectl cp` runs.
async fn tar(fs: &Mutex<Fs>, args: &[String], io: &mut Stdio) -> i32 {
    let mut extract = false;
    let mut create = false;
    let mut dir = "/".to_string();
    let mut paths = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-C" | "--directory" => {
                i += 1;
                if let Some(d) = args.get(i) {
                    dir = d.clone();
                }
            }
            "-" => {}
            a if a.starts_with("--") => {}
            // a bundle of short options (`-xmf`, `cf`): only the first word may omit the dash
            a if a.starts_with('-') || i == 0 => {
                extract |= a.contains('x');
                create |= a.contains('c');
            }
            a => paths.push(a.to_string()),
        }
        i += 1;
    }
    if extract == create {
        io.write(STDERR, "tar: You must specify one of the '-Acdtrux', '--delete' or '--test-label' options\n").await;
        return 2;
    }
    if extract {
        let data = match io.read_all(MAX_ARCHIVE_BYTES).await {
            Ok(d) => d,
            Err(()) => {
                io.write(STDERR, "tar: archive too large for this container\n").await;
                return 2;
            }
        };
        if !lock(fs).is_dir(&dir) {
            io.write(STDERR, format!("tar: {dir}: Cannot open: No such file or directory\ntar: Error is not recoverable: exiting now\n")).await;
            return 2;
        }
        let errors = extract_archive(&mut lock(fs), &dir, &data);
        if errors.is_empty() {
            return 0;
        }
        io.write(STDERR, format!("{}\ntar: Exiting with failure status due to previous errors\n", errors.join("\n"))).await;
        return 2;
    }
    if paths.is_empty() {
        io.write(STDERR, "tar: Cowardly refusing to create an empty archive\n").await;
        return 2;
    }
    let mut builder = tar::Builder::new(Vec::new());
    let mut missing = Vec::new();
    let mut stripped = false;
    {
        let f = lock(fs);
        for p in &paths {
            let nodes = f.subtree(&format!("{dir}/{p}"));
            if nodes.is_empty() {
                missing.push(p.clone());
                continue;
            }
            let base = normalize(&format!("{dir}/{p}"));
            // member names as given (GNU tar strips a leading `/` and says so)
            let shown = p.trim_end_matches('/');
            if shown.starts_with('/') {
                stripped = true;
            }
            let shown = shown.trim_start_matches('/');
            for (path, node) in nodes {
                let rel = &path[base.len()..];
                let name = format!("{shown}{rel}");
                let name = if name.is_empty() { ".".to_string() } else { name };
                let mut h = tar::Header::new_gnu();
                h.set_mtime(0);
                h.set_uid(0);
                h.set_gid(0);
                match node {
                    Node::Dir => {
                        h.set_entry_type(tar::EntryType::Directory);
                        h.set_mode(0o755);
                        h.set_size(0);
                        let _ = builder.append_data(&mut h, format!("{name}/"), std::io::empty());
                    }
                    Node::File(b) => {
                        h.set_entry_type(tar::EntryType::Regular);
                        h.set_mode(0o644);
                        h.set_size(b.len() as u64);
                        let _ = builder.append_data(&mut h, &name, &b[..]);
                    }
                }
            }
        }
    }
    if stripped {
        io.write(STDERR, "tar: Removing leading `/' from member names\n").await;
    }
    let data = builder.into_inner().unwrap_or_default();
    io.write(STDOUT, data).await;
    if missing.is_empty() {
        return 0;
    }
    let msg: String = missing.iter().map(|p| format!("tar: {p}: Cannot stat: No such file or directory\n")).collect();
    io.write(STDERR, format!("{msg}tar: Exiting with failure status due to previous errors\n")).await;
    2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container() -> Container {
        Container { pod: "p1".into(), name: "c".into(), env: vec![("A".into(), "1".into())] }
    }

    async fn exec(fs: &Mutex<Fs>, argv: &[&str], stdin: &[u8]) -> (i32, Vec<u8>, Vec<u8>) {
        let (in_tx, in_rx) = mpsc::channel(4);
        let (out_tx, mut out_rx) = mpsc::channel(64);
        if !stdin.is_empty() {
            in_tx.send(Bytes::copy_from_slice(stdin)).await.unwrap();
        }
        drop(in_tx);
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let Outcome::Exited(code) = run(&container(), fs, &argv, Stdio { stdin: Some(in_rx), out: out_tx }).await;
        let (mut o, mut e) = (Vec::new(), Vec::new());
        while let Ok((ch, b)) = out_rx.try_recv() {
            if ch == STDOUT {
                o.extend_from_slice(&b)
            } else {
                e.extend_from_slice(&b)
            }
        }
        (code, o, e)
    }

    #[tokio::test]
    async fn builtins_and_exit_codes() {
        let fs = Mutex::new(Fs::seeded("p1"));
        assert_eq!(exec(&fs, &["echo", "hi", "there"], b"").await, (0, b"hi there\n".to_vec(), vec![]));
        assert_eq!(exec(&fs, &["sh", "-c", "exit 3"], b"").await.0, 3);
        assert_eq!(exec(&fs, &["false"], b"").await.0, 1);
        assert_eq!(exec(&fs, &["cat"], b"from stdin").await.1, b"from stdin".to_vec());
        assert_eq!(exec(&fs, &["cat", "/etc/hostname"], b"").await.1, b"p1\n".to_vec());
        assert_eq!(exec(&fs, &["cat", "/nope"], b"").await.0, 1);
        assert_eq!(exec(&fs, &["hostname"], b"").await.1, b"p1\n".to_vec());
        assert!(String::from_utf8(exec(&fs, &["env"], b"").await.1).unwrap().contains("A=1\n"));
        let (code, out, _) = exec(&fs, &["nosuch"], b"").await;
        assert_eq!(code, 126);
        assert!(String::from_utf8(out).unwrap().contains("executable file not found in $PATH"));
        assert_eq!(exec(&fs, &["sh", "-c", "nosuch"], b"").await.0, 127);
        assert_eq!(exec(&fs, &["sh", "-c", "echo 'a  b'; exit 4"], b"").await, (4, b"a  b\n".to_vec(), vec![]));
        assert_eq!(exec(&fs, &["test", "-d", "/tmp"], b"").await.0, 0);
        assert_eq!(exec(&fs, &["test", "-d", "/etc/hostname"], b"").await.0, 1);
        assert_eq!(exec(&fs, &["ls", "/etc"], b"").await.1, b"hostname\nmotd\nos-release\n".to_vec());
    }

    /// What `kubectl cp` runs: `tar -xmf - -C /tmp` of its archive, then `tar cf - /tmp/x`
    /// gives the same bytes back under the member name without the leading `/`.
    #[tokio::test]
    async fn tar_round_trips_what_kubectl_cp_sends() {
        let fs = Mutex::new(Fs::seeded("p1"));
        let payload: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(payload.len() as u64);
        h.set_mode(0o600);
        b.append_data(&mut h, "x.bin", &payload[..]).unwrap();
        let archive = b.into_inner().unwrap();
        assert_eq!(exec(&fs, &["tar", "-xmf", "-", "-C", "/tmp"], &archive).await.0, 0);
        assert_eq!(&lock(&fs).read("/tmp/x.bin").unwrap()[..], &payload[..]);
        let (code, out, err) = exec(&fs, &["tar", "cf", "-", "/tmp/x.bin"], b"").await;
        assert_eq!(code, 0);
        assert!(String::from_utf8(err).unwrap().contains("Removing leading"));
        let mut a = tar::Archive::new(&out[..]);
        let mut e = a.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(e.path().unwrap().to_string_lossy(), "tmp/x.bin");
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut got).unwrap();
        assert_eq!(got, payload);
        // into a directory that is not there
        assert_eq!(exec(&fs, &["tar", "-xmf", "-", "-C", "/missing"], &archive).await.0, 2);
        assert_eq!(exec(&fs, &["tar", "cf", "-", "/missing"], b"").await.0, 2);
    }

    #[test]
    fn shell_words_quote() {
        assert_eq!(shell_words("a 'b c' \"d\\\"e\" f\\ g").unwrap(), vec!["a", "b c", "d\"e", "f g"]);
        assert_eq!(shell_words("'open"), None);
    }
}
