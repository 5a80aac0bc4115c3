"""The rules every test follows (docs/testing.md), checked over the test sources themselves.

No sub-second sleep: a test waits for an event, or for a condition polled under a deadline
(``waiting.wait_until``), never ``time.sleep(0.x)`` as a guess at how long something takes. A delay that is
part of what a stand-in simulates (a slow request of a fake server, an injected stall) is a named constant
of its module, listed in :data:`SIMULATED`.
"""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path

TESTS = Path(__file__).parent
HELPER = TESTS / "waiting.py"
"""The one helper that waits: it sleeps between its looks at a condition."""

SIMULATED: dict[str, set[str]] = {
    # a WSGI stand-in whose requests take a while, so that concurrent requests overlap
    "storage/test_s3_server_atomic.py": {"REQUEST_SECONDS"},
    # a slow change inside update_atomic, widening the window between the read and the write
    "storage/test_storage_contract.py": {"CHANGE_SECONDS"},
    # stand-in runs of the daemon that pretend to work, so that runs overlap
    "service/test_daemon.py": {"BUSY_SECONDS", "LOOK_GAP_SECONDS"},
    # a storage that stalls after a read (an injected delay)
    "reclaim/test_watermark_races.py": {"STALL_SECONDS"},
    # a listing that takes a measurable time
    "reclaim/test_reclaim_safety.py": {"LISTING_SECONDS"},
}
"""Sub-second delays that stand-ins simulate, by module (relative to ``tests/``): the only names a sleep may
take a value below a second from."""

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_IN_TEXT = re.compile(r"\bsleep\(\s*(0?\.\d+|0)\s*\)")
"""A sub-second sleep in the text of a script a test runs in a child process."""


def _constants(tree: ast.AST) -> dict[str, list[float]]:
    """Every number a name is assigned anywhere in the module (any scope), or given as a parameter's default."""
    pairs: list[tuple[ast.expr | ast.arg, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs += [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs.append((node.target, node.value))
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs += list(zip(positional[len(positional) - len(node.defaults):], node.defaults, strict=True))
            pairs += [(arg, default) for arg, default in zip(node.kwonlyargs, node.kw_defaults, strict=True)
                      if default is not None]
    found: dict[str, list[float]] = {}
    for target, value in pairs:
        name = target.arg if isinstance(target, ast.arg) else target.id if isinstance(target, ast.Name) else None
        number = _value(value, {})
        if name is not None and number is not None:
            found.setdefault(name, []).append(number)
    return found


def _value(node: ast.expr, names: dict[str, list[float]]) -> float | None:
    """The smallest value ``node`` can have, for numbers, names of numbers and their arithmetic; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name) and node.id in names:
        return min(names[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _value(node.operand, names)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, names), _value(node.right, names)
        if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
            return None
        return float(_OPS[type(node.op)](left, right))
    return None


def _is_sleep(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "sleep") or (isinstance(func, ast.Name)
                                                                        and func.id == "sleep")


def _names_in(node: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def short_sleeps(path: Path, allowed: set[str]) -> list[tuple[int, str]]:
    """``(line, what)`` of each sleep below a second in ``path`` that takes no name of ``allowed``, in order."""
    tree = ast.parse(path.read_text(), str(path))
    names = {name: values for name, values in _constants(tree).items() if name not in allowed}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_sleep(node) and node.args:
            seconds = _value(node.args[0], names)
            if seconds is not None and seconds < 1:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, f"{m.group(0)} (in a child's script)") for m in _IN_TEXT.finditer(node.value)]
    return sorted(found)


def sources() -> list[Path]:
    """The test sources under the rule: all but the helper and this module (whose samples break it)."""
    return sorted(p for p in TESTS.rglob("*.py") if p not in (HELPER, Path(__file__)) and "node_modules" not in p.parts)


def test_no_test_sleeps_for_a_guessed_fraction_of_a_second() -> None:
    found = [f"tests/{path.relative_to(TESTS)}:{line}: {what}" for path in sources()
             for line, what in short_sleeps(path, SIMULATED.get(path.relative_to(TESTS).as_posix(), set()))]
    assert not found, ("wait for the event or condition instead (waiting.wait_until), or name a simulated delay "
                       "and list it in SIMULATED:\n" + "\n".join(found))


def test_every_simulated_delay_listed_is_a_sleep_of_its_module() -> None:
    for module, allowed in SIMULATED.items():
        tree = ast.parse((TESTS / module).read_text())
        slept = {name for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_sleep(node) and node.args
                 for name in _names_in(node.args[0])}
        assert allowed <= slept, f"{module}: {sorted(allowed - slept)} listed but slept on nowhere"


def test_the_rule_finds_each_form_of_a_short_sleep(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import time\nfrom time import sleep\nPAUSE = 0.2\nLONG = 2\n"
        "def f(): time.sleep(0.05)\n"
        "def g(): sleep(.5)\n"
        "def h(): time.sleep(PAUSE)\n"
        "def i(): time.sleep(1 / 10)\n"
        "def j(): time.sleep(LONG)\n"
        "def k(): time.sleep(3)\n"
        "def m(poll=0.1): time.sleep(poll)\n"
        "def n(work): time.sleep(work)\n"
        "SCRIPT = 'import time; time.sleep(0.5)'\n"
    )
    assert [line for line, _ in short_sleeps(sample, set())] == [5, 6, 7, 8, 11, 13]
    assert [line for line, _ in short_sleeps(sample, {"PAUSE"})] == [5, 6, 8, 11, 13]
