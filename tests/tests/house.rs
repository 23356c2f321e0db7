//! The house rules a reader relies on: no two modules of a crate import each other, directly or
//! through others (`crate::…` and `super::…` paths outside comments and test modules); and the
//! crates are layered: the model crate builds without a video decoder or a data reader, and no
//! reader or evaluator depends on the builders of data (read from the `Cargo.toml` files and
//! `Cargo.lock`, with no network and no cargo).

use motionvl_tests::repo_root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: [&str; 8] = ["util", "models", "data", "construct", "flow", "train", "eval", "demo"];

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

fn read_toml(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Package name → folder of every workspace member.
fn members() -> BTreeMap<String, PathBuf> {
    let root = read_toml(&repo_root().join("Cargo.toml"));
    let members = root.get("workspace").and_then(|w| w.get("members")).and_then(|m| m.as_array()).expect("[workspace] members");
    members
        .iter()
        .filter_map(|m| m.as_str())
        .map(|dir| {
            let dir = repo_root().join(dir);
            let manifest = read_toml(&dir.join("Cargo.toml"));
            let name = manifest.get("package").and_then(|p| p.get("name")).and_then(|n| n.as_str()).expect("[package] name");
            (name.to_string(), dir)
        })
        .collect()
}

/// The packages a workspace member needs to build its library and binaries: `[dependencies]`
/// and its per-target forms, optional ones included (a feature may turn them on); not
/// `[dev-dependencies]`.
fn normal_dependencies(dir: &Path) -> BTreeSet<String> {
    let manifest = read_toml(&dir.join("Cargo.toml"));
    let targets = manifest.get("target").and_then(|t| t.as_table()).into_iter().flat_map(|t| t.values());
    let tables = std::iter::once(manifest.get("dependencies")).chain(targets.map(|t| t.get("dependencies")));
    let mut out = BTreeSet::new();
    for table in tables.flatten().filter_map(|t| t.as_table()) {
        for (key, spec) in table {
            // `alias = { package = "real-name", … }` depends on `real-name`.
            let package = spec.get("package").and_then(|p| p.as_str()).unwrap_or(key);
            out.insert(package.to_string());
        }
    }
    out
}

/// Package name → the packages it depends on, from `Cargo.lock` (every version of a name
/// merged, so the closure below can only grow, never miss one).
fn locked_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let lock = read_toml(&repo_root().join("Cargo.lock"));
    let packages = lock.get("package").and_then(|p| p.as_array()).expect("Cargo.lock [[package]]");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for package in packages {
        let name = package.get("name").and_then(|n| n.as_str()).expect("package name");
        let deps = package.get("dependencies").and_then(|d| d.as_array()).into_iter().flatten();
        // An entry is `name`, or `name version` when several versions are locked.
        let names = deps.filter_map(|d| d.as_str()).filter_map(|d| d.split(' ').next()).map(str::to_string);
        out.entry(name.to_string()).or_default().extend(names);
    }
    out
}

/// Every package `package` needs to build, itself included: workspace members by their normal
/// dependencies (the lock file also lists their dev-dependencies), everything else by the lock.
fn normal_closure(package: &str) -> BTreeSet<String> {
    let members = members();
    let locked = locked_dependencies();
    let mut seen = BTreeSet::new();
    let mut todo = vec![package.to_string()];
    while let Some(next) = todo.pop() {
        if !seen.insert(next.clone()) {
            continue;
        }
        let deps = match members.get(&next) {
            Some(dir) => normal_dependencies(dir),
            None => locked.get(&next).cloned().unwrap_or_default(),
        };
        todo.extend(deps.into_iter().filter(|d| !seen.contains(d)));
    }
    seen
}

/// The model crate reads preprocessed pixels, not videos: of the workspace it needs only
/// `motionvl-util`, and neither a decoder nor a dataset format comes with it.
#[test]
fn the_model_crate_needs_no_decoder_or_data_reader() {
    let closure = normal_closure("motionvl-models");
    let members = members();
    let in_workspace: BTreeSet<&str> = closure.iter().map(String::as_str).filter(|p| members.contains_key(*p) && *p != "motionvl-models").collect();
    assert_eq!(in_workspace, BTreeSet::from(["motionvl-util"]), "motionvl-models' workspace dependencies");
    for heavy in ["ffmpeg-next", "ffmpeg-sys-next", "parquet", "image", "csv"] {
        assert!(!closure.contains(heavy), "motionvl-models pulls in {heavy}");
    }
}

/// Readers and evaluators read what the builders write, through the schemas in `data`; none
/// of them may need the builders themselves (a dev-dependency for tests is fine).
#[test]
fn no_reader_or_evaluator_depends_on_the_builders() {
    for package in ["motionvl-data", "motionvl-eval", "motionvl-train", "motionvl-models", "motionvl-flow"] {
        assert!(!normal_closure(package).contains("motionvl-construct"), "{package} depends on motionvl-construct");
    }
}

/// The closure walk sees what it should: the CLI, which runs the builders, needs them.
#[test]
fn the_dependency_walk_finds_a_real_dependency() {
    let closure = normal_closure("motionvl-cli");
    for package in ["motionvl-construct", "motionvl-util", "ffmpeg-next"] {
        assert!(closure.contains(package), "motionvl-cli's closure lacks {package}");
    }
}
