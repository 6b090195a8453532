//! The workspace's shape: no import cycles between the modules of any crate, layers whose imports point down,
//! and a client library that links neither the server nor the command-line crates.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::module_graph::{Graph, show};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_owned()
}

/// Every library and binary crate root of the workspace's members.
fn crate_roots() -> Vec<(String, PathBuf)> {
    let mut roots = Vec::new();
    let mut members: Vec<_> = std::fs::read_dir(workspace())
        .expect("the workspace folder is readable")
        .map(|entry| entry.expect("a readable entry").path())
        .filter(|dir| dir.join("Cargo.toml").exists() && dir.join("src").is_dir())
        .collect();
    members.sort();
    for member in members {
        let name = member
            .file_name()
            .expect("a folder name")
            .to_string_lossy()
            .into_owned();
        let lib = member.join("src/lib.rs");
        if lib.exists() {
            roots.push((name.clone(), lib));
        }
        if let Ok(bins) = std::fs::read_dir(member.join("src/bin")) {
            let mut bins: Vec<_> = bins
                .map(|entry| entry.expect("a readable entry").path())
                .collect();
            bins.sort();
            for bin in bins
                .into_iter()
                .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
            {
                let stem = bin
                    .file_stem()
                    .expect("a file name")
                    .to_string_lossy()
                    .into_owned();
                roots.push((format!("{name} (bin {stem})"), bin));
            }
        }
    }
    roots
}

#[test]
fn no_crate_has_an_import_cycle() {
    let roots = crate_roots();
    let names: BTreeSet<&str> = roots.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [
        "grpo",
        "mock-core",
        "mock-server",
        "rollout-client",
        "rollout-cli",
    ] {
        assert!(
            names.contains(expected),
            "{expected} was not found among {names:?}"
        );
    }
    let cycles: Vec<String> = roots
        .iter()
        .flat_map(|(name, root)| Graph::load(name, root).cycles())
        .map(|cycle| cycle.to_string())
        .collect();
    assert!(cycles.is_empty(), "{}", cycles.concat());
}

/// The checker itself, on a fixture crate with known cycles: it must find them all, and only them.
#[test]
fn the_checker_finds_cycles_through_reexports_child_paths_and_macros() {
    let root = workspace().join("tests/data/cycle/src/lib.rs");
    let graph = Graph::load("cycle", &root);
    let modules: Vec<String> = graph.modules().map(|m| show(m)).collect();
    assert_eq!(modules, ["crate", "a", "b", "c", "clean"]);

    let edges: Vec<String> = graph
        .edges()
        .iter()
        .flat_map(|(from, to)| {
            to.iter()
                .map(move |(to, written)| format!("{} -> {} `{written}`", show(from), show(to)))
        })
        .collect();
    assert_eq!(
        edges,
        [
            "crate -> a `a::Alpha`",
            "a -> b `crate::b::Beta`",
            "a -> clean `crate::clean`",
            "b -> a `crate::Alpha`",
            "b -> c `crate::c::GAMMA`",
            "c -> b `super::b::Beta`",
        ]
    );
    let cycles: Vec<String> = graph.cycles().iter().map(ToString::to_string).collect();
    assert_eq!(
        cycles,
        [
            "import cycle in cycle:\n  a -> b (writes `crate::b::Beta`)\n  b -> a (writes `crate::Alpha`)\n  \
          b -> c (writes `crate::c::GAMMA`)\n  c -> b (writes `super::b::Beta`)\n"
        ]
    );
}

/// Every module under `layer` of `graph` refers only to modules under `layer` or one of `allowed`, and names
/// none of the `forbidden` crates.
fn assert_layer(graph: &Graph, layer: &[&str], allowed: &[&[&str]], forbidden: &[&str]) {
    assert_modules(
        graph,
        layer,
        |module| under(module, layer),
        allowed,
        forbidden,
    );
}

fn under(module: &[String], prefix: &[&str]) -> bool {
    module.len() >= prefix.len() && module.iter().zip(prefix).all(|(a, b)| a == b)
}

/// [`assert_layer`] for the modules `select` picks.
fn assert_modules(
    graph: &Graph,
    layer: &[&str],
    select: impl Fn(&[String]) -> bool,
    allowed: &[&[&str]],
    forbidden: &[&str],
) {
    let mut wrong = Vec::new();
    for module in graph.modules().filter(|m| select(m)) {
        for reference in graph.references(module) {
            if !under(&reference.target, layer)
                && !allowed
                    .iter()
                    .any(|prefix| under(&reference.target, prefix))
            {
                wrong.push(format!("{} writes `{}`", show(module), reference.written));
            }
        }
        for name in graph.externs(module) {
            if forbidden.contains(&name) {
                wrong.push(format!(
                    "{} ({}) names the crate `{name}`",
                    show(module),
                    graph.file(module).display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} breaks its layer:\n{}",
        layer.join("::"),
        wrong.join("\n")
    );
}

fn mock_core() -> Graph {
    Graph::load("mock-core", &workspace().join("mock-core/src/lib.rs"))
}

fn mock_server() -> Graph {
    Graph::load("mock-server", &workspace().join("mock-server/src/lib.rs"))
}

/// The core crate's layers: that none of them speaks HTTP or runs async is the compiler's to check (the crate
/// depends on neither, [`the_core_links_no_http_and_without_hf_no_tokenizers`]); which layer may import which
/// is checked here. The model is pure: it sees itself and Python's formatting of values (a leaf that imports
/// nothing, which a loaded model's chat template prints with, as Jinja2 under transformers prints). The
/// releases are a leaf too: data every layer reads.
#[test]
fn the_model_imports_nothing_but_itself() {
    let graph = mock_core();
    assert_layer(&graph, &["model"], &[&["pyfmt"]], &[]);
    assert_layer(&graph, &["pyfmt"], &[], &[]);
    assert_layer(&graph, &["release"], &[], &[]);
}

/// The engine (generation, plan, step core) sees the model, the configuration, the error type, the releases and
/// Python's `repr` (a stop pattern's abort message); what the
/// configuration brings along is data: the fault catalogue and schedule, the latency model, scripted rules.
#[test]
fn the_engine_imports_only_the_model_configuration_and_errors() {
    let graph = mock_core();
    assert_layer(
        &graph,
        &["engine"],
        &[
            &["model"],
            &["config"],
            &["error"],
            &["release"],
            &["pyfmt"],
        ],
        &[],
    );
    let data: &[&[&str]] = &[
        &["model"],
        &["config"],
        &["faults"],
        &["latency"],
        &["script"],
        &["release"],
    ];
    for lower in [
        &["config"][..],
        &["error"],
        &["faults"],
        &["latency"],
        &["script"],
        &["pyfmt"],
    ] {
        assert_layer(&graph, lower, data, &[]);
    }
}

/// Parsing and encoding build on the engine, the oracle on both; the witness records what the
/// engine generated as the wire and the fault catalogue shape it, and audits samples against it.
#[test]
fn requests_wire_the_oracle_and_the_witness_build_on_the_engine() {
    let graph = mock_core();
    let pure: &[&[&str]] = &[
        &["model"],
        &["config"],
        &["error"],
        &["pyfmt"],
        &["script"],
        &["engine"],
        &["release"],
    ];
    assert_layer(&graph, &["request"], pure, &[]);
    assert_layer(&graph, &["wire"], pure, &[]);
    let mut with_parts = pure.to_vec();
    with_parts.extend([&["request"][..], &["wire"]]);
    assert_layer(&graph, &["oracle"], &with_parts, &[]);
    assert_layer(
        &graph,
        &["witness"],
        &[
            &["model"],
            &["config"],
            &["engine"],
            &["faults"],
            &["wire"],
            &["release"],
        ],
        &[],
    );
}

/// The core is the compiler's to keep free of HTTP and async: it links none of their crates, and without its
/// `hf` feature none of the Hugging Face tokenizer's or the template engine's; the server library without
/// its default features links neither of those either.
#[test]
fn the_core_links_no_http_and_without_hf_no_tokenizers() {
    let core = normal_dependencies(&["-p", "mock-core"]);
    assert!(
        core.contains("mock-core") && core.contains("serde_json"),
        "cargo tree listed {core:?}"
    );
    let heavy = ["tokenizers", "minijinja", "minijinja-contrib"];
    let linked: Vec<&str> = [
        "axum",
        "http",
        "hyper",
        "tower",
        "tokio",
        "futures-util",
        "clap",
    ]
    .into_iter()
    .chain(heavy)
    .filter(|name| core.contains(*name))
    .collect();
    assert!(linked.is_empty(), "mock-core links {linked:?}");
    let with_hf = normal_dependencies(&["-p", "mock-core", "--features", "hf"]);
    assert!(
        heavy.iter().all(|name| with_hf.contains(*name)),
        "with `hf`, mock-core links {with_hf:?}"
    );
    let server = normal_dependencies(&["-p", "mock-server", "--no-default-features"]);
    let linked: Vec<&str> = heavy
        .into_iter()
        .filter(|name| server.contains(*name))
        .collect();
    assert!(
        linked.is_empty(),
        "mock-server without default features links {linked:?}"
    );
}

/// The control plane is async but knows nothing of HTTP, and nothing below HTTP imports the HTTP layer.
#[test]
fn only_http_imports_http() {
    let graph = mock_server();
    assert_layer(
        &graph,
        &["control"],
        &[&["config"], &["engine"], &["error"]],
        &["axum", "http", "hyper", "tower"],
    );
    let http = ["http"];
    let mut wrong = Vec::new();
    // The command line and the judge (record, replay, conform) sit above the HTTP layer: they start servers.
    for module in graph.modules().filter(|m| {
        !under(m, &http) && !under(m, &["cli"]) && !under(m, &["judge"]) && !m.is_empty()
    }) {
        for reference in graph.references(module) {
            if under(&reference.target, &http) {
                wrong.push(format!("{} writes `{}`", show(module), reference.written));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "only the HTTP layer may import it:\n{}",
        wrong.join("\n")
    );
}

/// The command line is the top of the server crate: nothing imports it, and nothing else names the crates it
/// alone depends on (the `cli` feature), so the library builds without them.
#[test]
fn only_the_command_line_names_the_cli_crates() {
    let graph = mock_server();
    let cli = ["cli"];
    let mut wrong = Vec::new();
    for module in graph.modules().filter(|m| !under(m, &cli)) {
        for reference in graph.references(module) {
            if under(&reference.target, &cli) {
                wrong.push(format!("{} writes `{}`", show(module), reference.written));
            }
        }
        for name in graph.externs(module) {
            if ["clap", "anyhow", "tracing_subscriber"].contains(&name) {
                wrong.push(format!(
                    "{} ({}) names the crate `{name}`",
                    show(module),
                    graph.file(module).display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the command line's crates and module leak into the library:\n{}",
        wrong.join("\n")
    );
}

/// A crate that links the server library without its command line compiles none of clap, anyhow or
/// tracing-subscriber.
#[test]
fn the_server_library_links_no_cli_crates() {
    let crates = normal_dependencies(&["-p", "mock-server", "--no-default-features"]);
    assert!(
        crates.contains("mock-server") && crates.contains("axum"),
        "cargo tree listed {crates:?}"
    );
    for cli in ["clap", "anyhow", "tracing-subscriber"] {
        assert!(
            !crates.contains(cli),
            "mock-server without `cli` links {cli}"
        );
    }
}

/// What a trainer links when it depends on the client library: no server, no CLI crates.
#[test]
fn the_client_library_links_neither_the_server_nor_the_cli() {
    let crates = normal_dependencies(&["-p", "rollout-client"]);
    assert!(
        crates.contains("rollout-client") && crates.contains("reqwest"),
        "cargo tree listed {crates:?}"
    );
    let linked: Vec<&str> = [
        "axum",
        "mock-server",
        "clap",
        "indicatif",
        "tracing-subscriber",
    ]
    .into_iter()
    .filter(|name| crates.contains(*name))
    .collect();
    assert!(linked.is_empty(), "rollout-client links {linked:?}");
}

/// The crates `cargo tree` lists for `selection` (a package and its features), normal dependencies only.
fn normal_dependencies(selection: &[&str]) -> BTreeSet<String> {
    let output = std::process::Command::new(env!("CARGO"))
        .arg("tree")
        .args(selection)
        .args(["-e", "normal", "--prefix", "none", "--offline", "--locked"])
        .current_dir(workspace())
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split(' ').next())
        .map(str::to_owned)
        .collect()
}
