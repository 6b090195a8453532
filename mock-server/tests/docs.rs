//! The tables the READMEs keep of the command line and the fault catalogue, against the code: a flag renamed, a
//! variable or a default changed, a fault kind added or removed fails here until the table says so.

use std::collections::BTreeSet;
use std::path::Path;

use clap::CommandFactory;
use mock_server::FaultKind;
use mock_server::cli::Cli;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The cells of the rows of the table whose header row is `heading`, without the header and rule rows.
fn table(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let after = doc
        .split_once(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"))
        .1;
    after
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(1)
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The backticked items of a cell, in order: "`--a`, `--b`" is ["--a", "--b"].
fn items(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Every row of the README's flag table names flags the command line has, with their environment variables
/// (`..._X` standing for `SGLANG_MOCK_X`) and their defaults (`none` and `off` for a flag without one).
#[test]
fn the_readme_flag_table_agrees_with_the_command_line() {
    let command = Cli::command();
    let readme = read("../README.md");
    let rows = table(&readme, "| flag | environment | default | meaning |");
    assert!(rows.len() >= 20, "the flag table has {} rows", rows.len());
    for row in rows {
        let [flags, envs, defaults, _meaning] = &row[..] else {
            panic!("a row of four cells: {row:?}");
        };
        // A visible alias (`--profile`) names the flag before it.
        let is_alias = |name: &str| {
            command.get_arguments().any(|a| {
                a.get_visible_aliases()
                    .is_some_and(|aliases| aliases.contains(&name))
            })
        };
        let flags: Vec<String> = items(flags)
            .into_iter()
            .filter(|f| f.starts_with("--") && !is_alias(f.trim_start_matches("--")))
            .collect();
        let envs: Vec<String> = items(envs)
            .into_iter()
            .map(|e| e.replace("..._", "SGLANG_MOCK_"))
            .collect();
        let defaults = items(defaults);
        for (i, flag) in flags.iter().enumerate() {
            let name = flag.trim_start_matches("--");
            let arg = command
                .get_arguments()
                .find(|a| a.get_long() == Some(name))
                .unwrap_or_else(|| {
                    panic!("README names {flag}, which the command line does not have")
                });
            let env = arg
                .get_env()
                .map(|e| e.to_string_lossy().into_owned())
                .unwrap_or_default();
            assert_eq!(envs.get(i), Some(&env), "{flag}'s variable");
            let default: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            // One default per flag, or one for the first flag of the row.
            let shown = if defaults.len() == flags.len() {
                defaults.get(i)
            } else {
                defaults.first().filter(|_| i == 0)
            };
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            match (default.as_slice(), shown) {
                // A switch defaults to false, which the table writes `off`; a value without a default, `none`.
                ([], None) => {}
                ([value], None) if value == "false" => {}
                // A default the code computes (the vocabulary's size): its help says it.
                ([], Some(shown)) => assert!(
                    help.contains(shown.as_str()),
                    "{flag} has no default; the README says {shown}, its help {help:?}"
                ),
                ([value], Some(shown)) => {
                    assert_eq!(value, shown, "{flag}'s default");
                }
                (default, shown) => {
                    panic!("{flag}: the code's default {default:?}, the README's {shown:?}")
                }
            }
        }
    }
}

/// The first cells of every table whose header starts `| flag |`, with the document each is in.
fn flag_cells(path: &str) -> Vec<(String, String)> {
    let doc = read(path);
    let mut cells = Vec::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with("| flag |") {
            in_table = true;
        } else if !line.starts_with('|') {
            in_table = false;
        } else if in_table && !line.starts_with("|---") {
            let first = line.trim_matches('|').split(" | ").next().unwrap_or("");
            cells.push((path.to_owned(), first.trim().to_owned()));
        }
    }
    cells
}

/// Each flag of `sglang-mock` has exactly one row in the flag tables of the README and the server's documents,
/// and each flag a table names is one the command line has: a new flag documented nowhere, or twice, fails here.
/// (A subcommand's flags are its own `--help`'s.)
#[test]
fn every_flag_has_one_row_in_one_table() {
    let command = Cli::command();
    let mut rows: Vec<(String, String)> = Vec::new();
    for path in [
        "../README.md",
        "README.md",
        "WITNESS.md",
        "VERSIONS.md",
        "CONFORM.md",
    ] {
        for (doc, cell) in flag_cells(path) {
            for flag in items(&cell).into_iter().filter(|f| f.starts_with("--")) {
                rows.push((flag.trim_start_matches("--").to_owned(), doc.clone()));
            }
        }
    }
    let aliases: BTreeSet<&str> = command
        .get_arguments()
        .flat_map(|a| a.get_visible_aliases().unwrap_or_default())
        .collect();
    let flags: BTreeSet<&str> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|name| !["help", "version"].contains(name))
        .collect();
    let mut problems = Vec::new();
    for flag in &flags {
        let places: Vec<&str> = rows
            .iter()
            .filter(|(f, _)| f == flag)
            .map(|(_, doc)| doc.as_str())
            .collect();
        if places.len() != 1 {
            problems.push(format!("--{flag} has {} rows: {places:?}", places.len()));
        }
    }
    for (flag, doc) in &rows {
        if !flags.contains(flag.as_str()) && !aliases.contains(flag.as_str()) {
            problems.push(format!(
                "{doc} documents --{flag}, which the command line does not have"
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The fault catalogue of `mock-server/README.md` has one row per fault kind.
#[test]
fn the_fault_table_lists_every_fault_kind() {
    let doc = read("README.md");
    let rows = table(
        &doc,
        "| kind | parameters (default) | what the client sees | applies to |",
    );
    let documented: Vec<String> = rows.iter().flat_map(|row| items(&row[0])).collect();
    let unique: BTreeSet<&str> = documented.iter().map(String::as_str).collect();
    assert_eq!(unique.len(), documented.len(), "a kind has two rows");
    let kinds: BTreeSet<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(unique, kinds);
}
