"""One screen per function, one purpose per module: no file in awarl/ over 650 lines and no
function over 80 (a ``def`` or ``async def`` from its first line to its last, nested ones counted
on their own as well as inside their parent)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "awarl"
MAX_FILE_LINES = 650
MAX_FUNCTION_LINES = 80

# Exceptions to the limits, each naming the file (and the function): none. A new entry needs a reason
# beside it and comes off when the file is split.
ALLOWED_FILES: set[str] = set()
ALLOWED_FUNCTIONS: set[tuple[str, str]] = set()


def _functions(tree: ast.AST):
    """(qualified name, lines) of every function, methods and nested functions included."""
    def walk(node: ast.AST, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                yield name, child.end_lineno - child.lineno + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)
    yield from walk(tree, "")


def _measure():
    long_files, long_functions = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            long_files.append((rel, lines))
        for name, size in _functions(ast.parse(text, filename=str(path))):
            if size > MAX_FUNCTION_LINES:
                long_functions.append((rel, name, size))
    return long_files, long_functions


def test_no_file_or_function_over_the_limits():
    long_files, long_functions = _measure()
    files = [f"{rel}: {n} lines" for rel, n in long_files if rel not in ALLOWED_FILES]
    functions = [f"{rel}: {name} is {n} lines" for rel, name, n in long_functions if (rel, name) not in ALLOWED_FUNCTIONS]
    assert not files and not functions, (f"over {MAX_FILE_LINES} lines per file or {MAX_FUNCTION_LINES} per "
                                         "function; split into named helpers:\n" + "\n".join(files + functions))


def test_the_allow_list_names_only_what_is_still_over():
    long_files, long_functions = _measure()
    stale = (ALLOWED_FILES - {rel for rel, _ in long_files}) | {
        f"{rel}: {name}" for rel, name in ALLOWED_FUNCTIONS - {(rel, name) for rel, name, _ in long_functions}}
    assert not stale, f"within the limits now; take them off the allow-list: {sorted(stale)}"


def test_the_measure_counts_nested_functions():
    tree = ast.parse("def outer():\n    def inner():\n        return 1\n    return inner\n")
    assert list(_functions(tree)) == [("outer", 4), ("outer.inner", 2)]
