"""Parse an index map written as ``lambda i, j: (i // 16, j, i % 16)`` without evaluating it.

Only names, integer constants, tuples and + - * // % are accepted; the result is a Python
function over TIR variables that ``transform_layout`` accepts."""

from __future__ import annotations

import ast
import inspect
import keyword
import operator

from explorer.schedule.errors import ScheduleError

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}


def parse_index_map(text: str):
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ScheduleError(f"index map {text!r} is not valid: {err.msg}") from None
    lam = tree.body
    if not isinstance(lam, ast.Lambda) or lam.args.vararg or lam.args.kwarg or lam.args.defaults:
        raise ScheduleError("an index map is written 'lambda i, j: (new, axes)'")
    names = [a.arg for a in lam.args.args]
    body = lam.body.elts if isinstance(lam.body, ast.Tuple) else [lam.body]

    def ev(node, env):
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand, env)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left, env), ev(node.right, env))
        raise ScheduleError(f"index map: {ast.unparse(node)!r} is not allowed (names, integers, + - * // % and "
                            "a leading minus only)")

    for expr in body:  # validate once without TIR variables
        ev(expr, {n: 1 for n in names})

    def index_map(*axes):
        if len(axes) != len(names):
            raise TypeError(f"the index map takes {len(names)} axes ({', '.join(names)}), not {len(axes)}")
        env = dict(zip(names, axes))
        return tuple(ev(e, env) for e in body)

    # transform_layout reads the callable's signature to know how many axes it takes
    index_map.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    return index_map


_PRINTED = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%"}  # TIR node class -> operator


def index_map_text(initial: list, final: list) -> str:
    """The ``lambda`` text :func:`parse_index_map` reads, for an index map from the variables
    ``initial`` to the expressions ``final`` (a TVM ``IndexMap``'s two sides, as a MetaSchedule
    trace holds them). Raises :class:`ScheduleError` for an expression outside + - * // % of
    variables and integers."""
    names: dict[object, str] = {}
    for k, var in enumerate(initial):
        name, n = var.name, k
        while not name.isidentifier() or keyword.iskeyword(name) or name in names.values():
            name, n = f"i{n}", n + len(initial)  # a name Python cannot take, or taken twice
        names[var] = name

    def text(expr, top: bool = False) -> str:
        kind = type(expr).__name__
        for var, name in names.items():
            if expr.same_as(var):
                return name
        if kind == "IntImm":
            return str(int(expr.value))
        op = _PRINTED.get(kind)
        if op is None:
            raise ScheduleError(f"index map expression {expr} cannot be written as a schedx index map "
                                "(+ - * // % of its variables and integers only)")
        inner = f"{text(expr.a)} {op} {text(expr.b)}"
        return inner if top else f"({inner})"

    return f"lambda {', '.join(names.values())}: ({', '.join(text(e, True) for e in final)}{',' if len(final) == 1 else ''})"
