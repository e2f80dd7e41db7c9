//! The crate's layers, checked from its sources: each top-level module of `src/` belongs to
//! one layer, and a module imports (`crate::...`, `super::...`) only modules of layers below
//! its own; no two modules of the crate import each other, directly or round a cycle.
//! A new top-level module must be placed in [`LAYERS`]. Test code (`tests*.rs`, `testutil`,
//! inline `#[cfg(test)] mod ... {}`) is not checked: it may reach any layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first, and their top-level modules. docs/ids-internals.md draws them.
const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["hostos", "memcap", "outcome", "prefilter"]),
    ("decode", &["decode"]),
    ("flow", &["flow"]),
    ("applayer", &["applayer"]),
    ("rules", &["rules"]),
    ("output", &["eve", "reject"]),
    ("engine", &["engine"]),
    ("service", &["service"]),
];

/// A module's path inside the crate (`["engine", "detect"]`), the crate root being `[]`.
type ModPath = Vec<String>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module a file defines.
fn mod_path(file: &Path) -> ModPath {
    let rel = file.strip_prefix(src_dir()).expect("under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

fn is_test_module(m: &ModPath) -> bool {
    m.iter()
        .any(|c| c.starts_with("test") || c.ends_with("_tests"))
}

/// The source without comments and without an inline `#[cfg(test)] mod name { ... }` (which
/// the crate's files keep last).
fn code(src: &str) -> String {
    let inline_tests =
        regex::Regex::new(r"#\[cfg\(test\)\]\s*(pub(\(crate\))? )?mod \w+ \{").expect("regex");
    let src = match inline_tests.find(src) {
        Some(m) => &src[..m.start()],
        None => src,
    };
    src.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths `src` names from module `m`: `crate::a::b::Item`, `super::x`,
/// `self::y`, with one level of braces expanded (`crate::a::{b, c::d}`).
fn referenced(src: &str, m: &ModPath) -> Vec<ModPath> {
    let re = regex::Regex::new(
        r"\b(crate|(?:super::)*super|self)::((?:[a-z_][a-z0-9_]*::)*)(\{[^{}]*\}|[A-Za-z_][A-Za-z0-9_]*)",
    )
    .expect("regex");
    let mut out = Vec::new();
    for c in re.captures_iter(src) {
        let base: ModPath = match &c[1] {
            "crate" => Vec::new(),
            "self" => m.clone(),
            s => m[..m.len().saturating_sub(s.matches("super").count())].to_vec(),
        };
        let mid: Vec<String> = c[2]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let last = &c[3];
        let lasts: Vec<&str> = match last.strip_prefix('{') {
            Some(inner) => inner
                .trim_end_matches('}')
                .split(',')
                .map(|s| s.trim().split("::").next().unwrap_or(""))
                .filter(|s| !s.is_empty())
                .collect(),
            None => vec![last],
        };
        for l in lasts {
            let mut p = base.clone();
            p.extend(mid.iter().cloned());
            p.push(l.to_string());
            out.push(p);
        }
    }
    out
}

/// Module to the modules it imports (non-test code; the longest existing module prefix of
/// each path named; a module's own ancestors and descendants are not imports).
fn imports() -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let mods: BTreeSet<ModPath> = files.iter().map(|f| mod_path(f)).collect();
    let mut out: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for f in &files {
        let m = mod_path(f);
        if is_test_module(&m) {
            continue;
        }
        let src = code(&std::fs::read_to_string(f).expect("read source"));
        let entry = out.entry(m.clone()).or_default();
        for mut t in referenced(&src, &m) {
            while !t.is_empty() && !mods.contains(&t) {
                t.pop();
            }
            if t.is_empty() || t.starts_with(&m) || m.starts_with(&t) {
                continue;
            }
            entry.insert(t);
        }
    }
    out
}

fn layer_of(top: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&top))
}

#[test]
fn every_module_imports_only_layers_below_its_own() {
    let mut wrong = Vec::new();
    for (m, targets) in imports() {
        let Some(top) = m.first() else { continue };
        let Some(own) = layer_of(top) else {
            if !is_test_module(&m) {
                wrong.push(format!(
                    "src module `{top}` is in no layer: add it to LAYERS"
                ));
            }
            continue;
        };
        for t in targets {
            let Some(ttop) = t.first() else { continue };
            if ttop == top {
                continue;
            }
            match layer_of(ttop) {
                Some(l) if l < own => {}
                _ => wrong.push(format!(
                    "{} (layer {}) imports {} (layer {})",
                    m.join("::"),
                    LAYERS[own].0,
                    t.join("::"),
                    layer_of(ttop).map_or("none", |l| LAYERS[l].0)
                )),
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "upward imports:\n{}", wrong.join("\n"));
}

#[test]
fn no_two_modules_import_each_other() {
    let g = imports();
    // Tarjan's strongly connected components; any with two or more modules is a cycle.
    struct T<'a> {
        g: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        cycles: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a ModPath) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.stack.contains(&w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                comp.push(w.join("::"));
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.cycles.push(comp);
            }
        }
    }
    let mut t = T {
        g: &g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        cycles: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    assert!(t.cycles.is_empty(), "import cycles: {:?}", t.cycles);
}

#[test]
fn the_checker_sees_an_upward_import() {
    let m: ModPath = vec!["decode".into(), "tunnel".into()];
    let src = code("use crate::engine::Detector; // crate::rules\nuse super::{defrag::Key, x};");
    let refs = referenced(&src, &m);
    assert!(refs.contains(&vec!["engine".into(), "Detector".into()]));
    assert!(refs.contains(&vec!["decode".into(), "defrag".into()]));
    assert!(!refs.iter().any(|r| r.first().is_some_and(|f| f == "rules")));
    assert!(layer_of("engine") > layer_of("decode"));
}
