//! Keeps ARCHITECTURE.md true and the module graph acyclic (issue 26). No kernel, no root:
//! it reads the source tree.
//!
//! - Every workspace package is named in ARCHITECTURE.md, and every package the map names
//!   exists: a crate added without a place on the map fails here.
//! - Within each crate, imports between sibling modules go one way: for every module, the
//!   graph of its children (an edge when anything in one child's files names another child
//!   through `crate::`, `super::` or `self::`) has no cycle. Test code (`tests.rs`, files under
//!   a `tests/` directory, and what follows `#[cfg(test)]`) is left out: a test may reach
//!   anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace root (this file's crate is daemon/relayd).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (package name, directory) of every workspace member, from the root manifest's globs.
fn packages() -> Vec<(String, PathBuf)> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("members in the root Cargo.toml");
    let mut out = Vec::new();
    for m in members.split(',').map(|m| m.trim().trim_matches('"')) {
        if m.is_empty() {
            continue;
        }
        let dirs: Vec<PathBuf> = match m.strip_suffix("/*") {
            Some(parent) => std::fs::read_dir(root().join(parent))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.join("Cargo.toml").exists())
                .collect(),
            None => vec![root().join(m)],
        };
        for d in dirs {
            let text = std::fs::read_to_string(d.join("Cargo.toml")).unwrap();
            let name = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = \""))
                .and_then(|l| l.strip_suffix('"'))
                .unwrap_or_else(|| panic!("no package name in {}", d.display()))
                .to_string();
            out.push((name, d));
        }
    }
    out.sort();
    out
}

#[test]
fn the_map_names_every_crate() {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md at the repository root");
    let pkgs = packages();
    assert!(pkgs.len() > 10, "{pkgs:?}");
    let missing: Vec<&str> = pkgs
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| {
            !map.contains(&format!("`{n}`"))
                && !map
                    .lines()
                    .any(|l| l.split(" ->").next().map(str::trim) == Some(*n))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md does not name (as `name`) these crates: {missing:?}"
    );
    // And names none that is gone: every `relay-...` the map mentions is a package.
    let names: BTreeSet<&str> = pkgs.iter().map(|(n, _)| n.as_str()).collect();
    let stale: Vec<String> = map
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.starts_with("relay-") && !w.contains(['/', ' ', ':', '.', '*']))
        .filter(|w| !names.contains(w))
        .map(str::to_string)
        .collect();
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md names crates that do not exist: {stale:?}"
    );
}

/// The workspace crates `[dependencies]` of the manifest in `dir` names (not dev- or
/// build-dependencies).
fn workspace_deps(dir: &Path, names: &BTreeSet<&str>) -> BTreeSet<String> {
    let text = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if !in_deps {
            continue;
        }
        let name = line
            .split(['=', '.', ' '])
            .next()
            .unwrap_or_default()
            .trim();
        if names.contains(name) {
            out.insert(name.to_string());
        }
    }
    out
}

#[test]
fn the_maps_arrows_are_the_manifests() {
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let pkgs = packages();
    let names: BTreeSet<&str> = pkgs.iter().map(|(n, _)| n.as_str()).collect();
    let arrows: BTreeMap<&str, BTreeSet<String>> = map
        .lines()
        .filter_map(|l| {
            l.split_once(" -> ")
                .or_else(|| l.strip_suffix(" ->").map(|n| (n, "")))
        })
        .map(|(from, to)| {
            (
                from.trim(),
                to.split_whitespace().map(str::to_string).collect(),
            )
        })
        .filter(|(from, _)| names.contains(from))
        .collect();
    let mut wrong = Vec::new();
    for (name, dir) in &pkgs {
        let real = workspace_deps(dir, &names);
        match arrows.get(name.as_str()) {
            None => wrong.push(format!("{name}: no `{name} -> ...` line")),
            Some(drawn) if *drawn != real => wrong.push(format!(
                "{name}: the map says {drawn:?}, Cargo.toml says {real:?}"
            )),
            Some(_) => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's arrows are out of date:\n{}",
        wrong.join("\n")
    );
}

/// The module path of a source file under `src` (`lib.rs`/`main.rs` is the root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") || !parts.is_empty() && stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// Rust source with comments and string literals blanked (so paths in docs do not count).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            i = end;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // A char literal such as '{' (lifetimes have no closing quote).
            i += 3;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// `code` without the items under `#[cfg(test)]`, and the names of test-only modules
/// declared `mod name;` (their files are left out by the caller).
fn strip_test_items(code: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(code.len());
    let mut mods = Vec::new();
    let mut rest = code;
    while let Some(p) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..p]);
        let item = &rest[p + "#[cfg(test)]".len()..];
        let trimmed = item.trim_start();
        if let Some(m) = trimmed
            .strip_prefix("mod ")
            .or_else(|| trimmed.strip_prefix("pub(crate) mod "))
        {
            let name: String = m
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if m[name.len()..].trim_start().starts_with(';') {
                mods.push(name);
            }
        }
        // The item ends at its first `;` outside braces or at its closing brace.
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, mods)
}

/// Every path this code names through `crate::`, `super::` or `self::`, resolved to an
/// absolute module path (segments after the crate), group imports expanded.
fn paths_named(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (start, _) in code.match_indices("::") {
        // The segment before `::` must be a whole word.
        let before = &code[..start];
        let word_start = before
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let head = &before[word_start..];
        if word_start > 0 && before[..word_start].ends_with("::") {
            continue; // a later segment of a path already taken
        }
        let mut base: Vec<String> = match head {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => module[..module.len().saturating_sub(1)].to_vec(),
            _ => continue,
        };
        let mut rest = &code[start + 2..];
        // Chained `super::super::`.
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        expand(rest, base, &mut out);
    }
    out
}

/// Reads `a::b::{c, d::e}` at the start of `rest` onto `base`.
fn expand(rest: &str, mut base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut rest = rest.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 || (depth == 1 && c == ',') {
                    expand(&item, base.clone(), out);
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else {
                    item.push(c);
                }
            }
            return;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        let seg = &rest[..end];
        if seg != "self" {
            base.push(seg.to_string());
        }
        match rest[end..].trim_start().strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    if !base.is_empty() {
        out.push(base);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

/// The cycles among sibling modules of one crate: each as the modules of one strongly
/// connected component (Tarjan's algorithm on each parent's children).
fn cycles(src: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut known: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut uses: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    for f in &files {
        let module = module_of(src, f);
        known.insert(module.clone());
        let (code, test_mods) = strip_test_items(&code_only(&std::fs::read_to_string(f).unwrap()));
        for m in test_mods {
            let mut t = module.clone();
            t.push(m);
            test_only.insert(t);
        }
        for p in paths_named(&code, &module) {
            uses.push((module.clone(), p));
        }
    }
    // Files of `#[cfg(test)] mod name;` and everything under them.
    uses.retain(|(from, _)| !test_only.iter().any(|t| from.starts_with(t)));
    known.retain(|m| !test_only.iter().any(|t| m.starts_with(t)));
    // Modules declared inline have no file; the file-backed ones are the nodes.
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, to) in uses {
        // The deepest common parent; the two children of it on each side are the edge.
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        let (Some(a), Some(b)) = (from.get(common), to.get(common)) else {
            continue;
        };
        let mut child_a = from[..common].to_vec();
        child_a.push(a.clone());
        let mut child_b = to[..common].to_vec();
        child_b.push(b.clone());
        if known.contains(&child_a) && known.contains(&child_b) {
            edges.entry(child_a).or_default().insert(child_b);
        }
    }
    let nodes: Vec<Vec<String>> = known.into_iter().collect();
    let index: BTreeMap<&Vec<String>, usize> =
        nodes.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let adj: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            edges
                .get(n)
                .map(|s| s.iter().filter_map(|t| index.get(t).copied()).collect())
                .unwrap_or_default()
        })
        .collect();
    tarjan(&adj)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.into_iter().map(|i| nodes[i].join("::")).collect())
        .collect()
}

fn tarjan(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct T<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T<'_>, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &t.adj[v] {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(i) if t.on[w] => t.low[v] = t.low[v].min(i),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                c.push(w);
                if w == v {
                    break;
                }
            }
            t.out.push(c);
        }
    }
    let n = adj.len();
    let mut t = T {
        adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn module_imports_go_one_way() {
    let mut found = Vec::new();
    for (name, dir) in packages() {
        for c in cycles(&dir.join("src")) {
            found.push(format!("{name}: {}", c.join(" <-> ")));
        }
    }
    assert!(
        found.is_empty(),
        "{} import cycles among sibling modules (make one side depend on the other, or move \
         what both need below them):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let dir = std::env::temp_dir().join(format!("relayd-arch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("c")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a; mod b; mod c;").unwrap();
    std::fs::write(
        dir.join("a/mod.rs"),
        "mod x; mod y; use crate::b::{f, g::h};",
    )
    .unwrap();
    std::fs::write(dir.join("a/x.rs"), "use super::y::Y; // crate::c::Z\n").unwrap();
    std::fs::write(
        dir.join("a/y.rs"),
        "fn f() { super::super::c::k(); super::x::X; }",
    )
    .unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::{c, a::x};").unwrap();
    std::fs::write(
        dir.join("c.rs"),
        "const S: &str = \"crate::a::x\";\n#[cfg(test)]\nuse crate::b;\n#[cfg(test)]\nmod t;\n\
         #[cfg(test)]\nmod u { use crate::a; }\nfn g() -> char { '{' }",
    )
    .unwrap();
    std::fs::write(dir.join("c/t.rs"), "use crate::a;").unwrap();
    let mut found = cycles(&dir);
    found.iter_mut().for_each(|c| c.sort());
    found.sort();
    assert_eq!(
        found,
        vec![
            vec!["a".to_string(), "b".to_string()],
            vec!["a::x".into(), "a::y".into()]
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
