"""scripts/check_cycles.py: the Rust and Python import-cycle finder, on small fake trees."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_cycles.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cc = _load()

CYCLIC = {
    "Cargo.toml": '[package]\nname = "cyclic"\n',
    "src/lib.rs": "pub mod a;\npub mod b;\n",
    "src/a.rs": "use crate::b::X;\npub struct Y;\n",
    "src/b.rs": "pub struct X;\npub fn y() -> super::a::Y {\n    super::a::Y\n}\n",
}

# No cycle: every edge that would close one is test-only, a comment, a string or an inline mod.
CALM = {
    "Cargo.toml": '[package]\nname = "calm"\n',
    "src/lib.rs": "pub mod a;\npub mod b;\npub mod c;\n#[cfg(test)]\nmod check;\n",
    "src/a.rs": (
        "pub struct B;\npub struct C;\n\n#[cfg(test)]\nmod tests {\n    use crate::b::Z;\n"
        "    #[test]\n    fn t() {\n        let _ = (Z, crate::c::W, '}');\n    }\n}\n"
    ),
    "src/b.rs": (
        "use crate::{a::{B, C}};\n// see crate::c for more\n/// docs: [`W`](crate::c::W)\n"
        "/* block /* nested crate::c */ still a comment crate::c */\n"
        'const S: &str = "crate::c::W";\nconst R: &str = r#"crate::c "::W"#;\n'
        "pub struct Z(B, C);\n"
    ),
    "src/c.rs": "use super::b::Z;\npub struct W;\nmod imp {\n    use super::W;\n}\n",
    "src/check.rs": "use crate::c::W;\n",
    "src/bin/tool.rs": "use calm::a::B;\nfn main() {\n    let _ = crate::a::B;\n}\n",
    "target/pkg/Cargo.toml": '[package]\nname = "built"\n',
    "target/pkg/src/lib.rs": "mod a;\n",
    "target/pkg/src/a.rs": "use crate::a::b;\n",
}

PYTHON = {
    "__init__.py": "from . import _dtcomm\nfrom .api import run\n",
    "_dtcomm.pyi": "def native() -> None: ...\n",
    "api.py": "from . import _dtcomm, helpers\n\n\ndef run() -> None:\n    helpers.f()\n",
    "helpers.py": "def f() -> None:\n    from .api import run\n\n    return run\n",
    "sub/__init__.py": "from .. import api\nimport dtcomm.helpers\nimport os\n",
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    _write(tmp_path / "cyclic", CYCLIC)
    _write(tmp_path / "calm", CALM)
    _write(tmp_path / "python" / "dtcomm", PYTHON)
    return tmp_path


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True
    )


def test_expand_use_flattens_nested_groups() -> None:
    uses = cc.expand_use("crate::{a::{B, C as D}, e::*, self}", 100)
    assert uses == [
        (["crate", "a", "B"], 112),
        (["crate", "a", "C"], 115),
        (["crate", "e"], 127),
        (["crate"], 130),
    ]


def test_strip_rust_blanks_comments_and_literals_only() -> None:
    text = CALM["src/b.rs"] + "fn f(c: char) -> bool { c == '\"' || c == '{' }\n"
    stripped = cc.strip_rust(text)
    assert len(stripped) == len(text) and stripped.count("\n") == text.count("\n")
    assert "crate::c" not in stripped
    assert "use crate::{a::{B, C}};" in stripped and "pub struct Z(B, C);" in stripped
    assert stripped.count("{") == stripped.count("}")


def test_strip_cfg_test_removes_items_and_names_test_files() -> None:
    text, mods = cc.strip_cfg_test(cc.strip_rust(CALM["src/a.rs"] + CALM["src/lib.rs"]))
    assert "crate::" not in text and "mod tests" not in text and "mod check" not in text
    assert "pub struct B;" in text and "pub mod c;" in text
    assert mods == ["check"]


def test_resolve_takes_the_longest_module_prefix() -> None:
    mods = {(): Path("lib.rs"), ("shm",): Path("shm/mod.rs"), ("shm", "host"): Path("host.rs")}
    assert cc.resolve_rust(["crate", "shm", "host", "record"], ("x",), mods) == Path("host.rs")
    assert cc.resolve_rust(["crate", "shm", "ops", "f"], ("x",), mods) == Path("shm/mod.rs")
    assert cc.resolve_rust(["super", "Thing"], ("shm", "host"), mods) == Path("shm/mod.rs")
    assert cc.resolve_rust(["super", "super", "E"], ("shm", "host"), mods) == Path("lib.rs")
    assert cc.resolve_rust(["self", "host", "T"], ("shm",), mods) == Path("host.rs")
    assert cc.resolve_rust(["std", "shm", "host"], ("shm",), mods) is None


def test_rust_graph(tree: Path) -> None:
    graph: dict = {}
    # cyclic: lib, a, b; calm: lib, a, b, c and the binary (check.rs is test-only; target/ skipped)
    assert cc.rust_graph(tree, graph) == 8
    assert {src: set(dsts) for src, dsts in graph.items() if dsts} == {
        "cyclic/src/a.rs": {"cyclic/src/b.rs"},
        "cyclic/src/b.rs": {"cyclic/src/a.rs"},
        "calm/src/b.rs": {"calm/src/a.rs"},
        "calm/src/c.rs": {"calm/src/b.rs"},
    }
    assert graph["cyclic/src/b.rs"]["cyclic/src/a.rs"].line == 2
    assert graph["calm/src/b.rs"]["calm/src/a.rs"].text == "use crate::a::B"


def test_python_graph_counts_function_local_imports(tree: Path) -> None:
    graph: dict = {}
    assert cc.python_graph(tree, graph) == 4
    assert {src: set(dsts) for src, dsts in graph.items() if dsts} == {
        "python/dtcomm/__init__.py": {"python/dtcomm/api.py"},
        "python/dtcomm/api.py": {"python/dtcomm/helpers.py"},
        "python/dtcomm/helpers.py": {"python/dtcomm/api.py"},
        "python/dtcomm/sub/__init__.py": {"python/dtcomm/api.py", "python/dtcomm/helpers.py"},
    }
    edge = graph["python/dtcomm/helpers.py"]["python/dtcomm/api.py"]
    assert (edge.line, edge.text) == (2, "from .api import run")


def test_from_package_import_attribute_points_at_init(tmp_path: Path) -> None:
    package = {"__init__.py": "from .a import f\nV = 1\n", "a.py": "from . import V\n"}
    _write(tmp_path / "python" / "dtcomm", package)
    _graph, cycles, _, n_python = cc.find_cycles(tmp_path)
    assert n_python == 2
    assert [cycle for _, cycle in cycles] == [
        ["python/dtcomm/__init__.py", "python/dtcomm/a.py", "python/dtcomm/__init__.py"]
    ]


def test_cycle_through_a_bigger_component() -> None:
    graph: dict = {}
    for src, dst in [("a", "b"), ("b", "c"), ("c", "a"), ("b", "a"), ("c", "d")]:
        graph.setdefault(src, {})[dst] = cc.Edge(src, dst, 1, "")
    comps = [c for c in cc.strongly_connected(graph) if len(c) > 1]
    assert comps == [["a", "b", "c"]]
    assert cc.shortest_cycle(graph, comps[0]) == ["a", "b", "a"]


def test_script_exits_1_listing_each_cycle(tree: Path) -> None:
    result = _run(tree)
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "import cycle: cyclic/src/a.rs -> cyclic/src/b.rs -> cyclic/src/a.rs" in out
    assert "cyclic/src/a.rs:1: use crate::b::X" in out
    assert "cyclic/src/b.rs:2: super::a::Y" in out
    assert (
        "import cycle: python/dtcomm/api.py -> python/dtcomm/helpers.py -> python/dtcomm/api.py"
        in out
    )
    assert "python/dtcomm/helpers.py:2: from .api import run" in out
    assert "calm/" not in out
    assert out.splitlines()[-1] == (
        "2 import cycle(s) between files (8 Rust files, 4 Python files)"
    )


# No two files form a cycle, but the folders do: engine/ holds shm's group, shm/ runs on the
# engine (the loop the folder pass exists for). A file's own parent module is no room.
FOLDERS = {
    "Cargo.toml": '[package]\nname = "folders"\n',
    "src/lib.rs": "mod engine;\nmod shm;\nmod leaf;\n",
    "src/engine.rs": "mod run;\npub struct Engine;\npub fn group() -> crate::shm::group::G {\n"
    "    todo!()\n}\n",
    "src/engine/run.rs": "use super::Engine;\npub fn go(_: Engine) {}\n",
    "src/shm/mod.rs": "pub mod group;\npub mod ops;\n",
    "src/shm/group.rs": "pub struct G;\n",
    "src/shm/ops.rs": "use crate::engine::run::go;\nuse crate::leaf::L;\n",
    "src/leaf.rs": "pub struct L;\n",
}


def test_a_loop_between_folders_is_a_cycle_though_no_two_files_make_one(tmp_path: Path) -> None:
    _write(tmp_path / "folders", FOLDERS)
    _graph, cycles, n_rust, _ = cc.find_cycles(tmp_path)
    assert n_rust == 7
    assert [cycle for _, cycle in cycles] == [
        ["folders/src/engine/", "folders/src/shm/", "folders/src/engine/"]
    ]
    out = _run(tmp_path).stdout
    assert "import cycle: folders/src/engine/ -> folders/src/shm/ -> folders/src/engine/" in out
    assert "folders/src/engine/:3: crate::shm::group::G (folders/src/engine.rs)" in out
    assert "folders/src/shm/:1: use crate::engine::run::go (folders/src/shm/ops.rs)" in out
    # The leaf is a file room; the child's edge to its own parent (run.rs -> engine.rs) none.
    places: dict = {}
    file_graph: dict = {}
    cc.rust_graph(tmp_path, file_graph, places)
    rooms = cc.room_graph(file_graph, places)
    assert set(rooms["folders/src/shm/"]) == {"folders/src/engine/", "folders/src/leaf.rs"}
    assert "folders/src/engine/" not in rooms.get("folders/src/engine/", {})


def test_script_exits_0_without_cycles(tree: Path) -> None:
    (tree / "cyclic" / "src" / "b.rs").write_text("pub struct X;\n")
    (tree / "python" / "dtcomm" / "helpers.py").write_text("def f() -> None: ...\n")
    result = _run(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "no import cycles between files (8 Rust files, 4 Python files)\n"
