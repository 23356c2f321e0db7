//! The house rules a reader relies on: no two modules of a crate import each other, directly or
//! through others (`crate::…` and `super::…` paths outside comments and test modules).

use motionvl_tests::repo_root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: [&str; 6] = ["models", "data", "flow", "train", "eval", "demo"];

/// Library source files of a crate with their module paths (`["dis", "search"]` for
/// `src/dis/search.rs`); binaries are leaves and left out.
fn modules(src: &Path) -> Vec<(Vec<String>, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap_or(&path).with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.push((parts, path));
        }
    }
    out
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests`.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Identifier paths following `prefix` in `code` (`crate::a::b::C` → `["a", "b", "C"]`).
fn paths_after<'a>(code: &'a str, prefix: &'a str) -> impl Iterator<Item = Vec<&'a str>> + 'a {
    code.match_indices(prefix).filter_map(move |(i, _)| {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let rest = &code[i + prefix.len()..];
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
        let path: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
        (!path.is_empty()).then_some(path)
    })
}

/// Module → modules it imports, within one crate.
fn import_graph(crate_dir: &str) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = repo_root().join(crate_dir).join("src");
    let files = modules(&src);
    let known: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    // The longest known module that `path` starts with.
    let resolve = |path: Vec<String>| -> Option<Vec<String>> { (1..=path.len()).rev().map(|k| path[..k].to_vec()).find(|m| known.contains(m)) };
    let mut graph = BTreeMap::new();
    for (module, file) in &files {
        let code = code(file);
        // `super::` names the parent module (for `dis/mod.rs`, module `dis`, that is the root).
        let parent: Vec<String> = module[..module.len().saturating_sub(1)].to_vec();
        let mut targets = BTreeSet::new();
        for path in paths_after(&code, "crate::") {
            targets.extend(resolve(path.iter().map(|s| s.to_string()).collect()));
        }
        for path in paths_after(&code, "super::") {
            let mut full = parent.clone();
            full.extend(path.iter().map(|s| s.to_string()));
            targets.extend(resolve(full));
        }
        // A module may use its own children and its ancestors' re-exports: only siblings and
        // cousins count as imports.
        targets.retain(|t: &Vec<String>| !t.starts_with(module) && !module.starts_with(t));
        graph.insert(module.clone(), targets);
    }
    graph
}

/// Some cycle of `graph`, if it has one.
fn find_cycle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        marks: &mut BTreeMap<Vec<String>, Mark>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = stack.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = stack[start..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph.keys().find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn no_two_modules_import_each_other() {
    for crate_dir in CRATES {
        let graph = import_graph(crate_dir);
        assert!(!graph.is_empty(), "{crate_dir}: no modules found");
        if let Some(cycle) = find_cycle(&graph) {
            let names: Vec<String> = cycle.iter().map(|m| format!("{crate_dir}::{}", m.join("::"))).collect();
            panic!("import cycle: {}", names.join(" → "));
        }
    }
}

/// The checker itself finds a cycle: two sibling modules naming each other.
#[test]
fn a_cycle_is_found() {
    let a = vec!["a".to_string()];
    let b = vec!["b".to_string()];
    let graph = BTreeMap::from([(a.clone(), BTreeSet::from([b.clone()])), (b.clone(), BTreeSet::from([a.clone()]))]);
    assert_eq!(find_cycle(&graph), Some(vec![a.clone(), b, a]));
}
