//! `python/dtcomm/_vocab.py` against the engine's tables: Python's `ReduceOp` numbers are what
//! `Communicator.all_reduce(op=...)` hands the engine (read back by `ReduceOp::from_u8`) and its
//! names, lowercased, are the engine's names (`ReduceOp.engine_name`); Python's `DType` values
//! are names the engine parses, one per engine dtype. The Python file is read as text, so this
//! needs neither Python nor the built extension.

use std::collections::BTreeMap;
use std::path::Path;

use dtcomm::{DType, ReduceOp};

fn vocab() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/dtcomm/_vocab.py");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `NAME = value` lines of the class `class_line` opens (its body: the lines indented four
/// spaces up to the next line that is not indented), in order.
fn members(src: &str, class_line: &str) -> Vec<(String, String)> {
    assert!(
        src.lines().any(|l| l.starts_with(class_line)),
        "_vocab.py has no `{class_line}`"
    );
    let lines = src
        .lines()
        .skip_while(|l| !l.starts_with(class_line))
        .skip(1);
    let mut out = Vec::new();
    for l in lines {
        if !l.is_empty() && !l.starts_with(' ') {
            break;
        }
        let Some(body) = l.strip_prefix("    ") else {
            continue;
        };
        if body.starts_with(' ') {
            continue; // deeper: a method's body or a continued docstring
        }
        let Some((name, value)) = body.split_once(" = ") else {
            continue;
        };
        if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            out.push((name.to_string(), value.trim().to_string()));
        }
    }
    out
}

#[test]
fn reduce_op_numbers_and_names_are_the_engines() {
    let python: Vec<(String, String)> = members(&vocab(), "class ReduceOp(");
    let rust: Vec<(String, String)> = ReduceOp::ALL
        .iter()
        .map(|o| (o.name().to_ascii_uppercase(), (*o as u8).to_string()))
        .collect();
    assert_eq!(
        python, rust,
        "python/dtcomm/_vocab.py's ReduceOp (left) differs from dtcomm::ReduceOp (right)"
    );
    for (name, number) in &python {
        let code: u8 = number.parse().unwrap();
        let op = ReduceOp::from_u8(code).unwrap();
        assert_eq!(op.name(), name.to_ascii_lowercase(), "{name} = {number}");
    }
}

#[test]
fn dtype_names_are_the_engines() {
    let python = members(&vocab(), "class DType(");
    let mut seen: BTreeMap<u8, String> = BTreeMap::new();
    for (name, value) in &python {
        let engine_name = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("DType.{name} = {value}: not a string"));
        assert_eq!(name.to_ascii_lowercase(), engine_name, "DType.{name}");
        let d = DType::parse(engine_name)
            .unwrap_or_else(|| panic!("DType.{name} = {value}: the engine has no such dtype"));
        if let Some(other) = seen.insert(d as u8, name.clone()) {
            panic!("DType.{other} and DType.{name} are both {d:?}");
        }
    }
    let missing: Vec<DType> = DType::ALL
        .into_iter()
        .filter(|d| !seen.contains_key(&(*d as u8)))
        .collect();
    assert!(missing.is_empty(), "_vocab.py's DType lacks {missing:?}");
}
