"""A tiny, safe expression language for search-space conditions and user constraints.

``speculative_eagle_topk > 1``, ``draft <= steps * topk + 1 and not (topk == 8 and steps > 6)``.
Only names, numbers, strings, booleans, arithmetic, comparisons and and/or/not are allowed: nothing is ever
executed, so a hostile YAML value cannot run code. Dashes in parameter names become underscores; ``steps``,
``topk``, ``draft`` and ``algorithm`` are short aliases for the speculative flags.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from typing import Any

ALIASES = {
    "steps": "speculative_num_steps",
    "topk": "speculative_eagle_topk",
    "draft": "speculative_num_draft_tokens",
    "algorithm": "speculative_algorithm",
}

_BIN = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMP = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


class ExprError(ValueError):
    pass


def ident(name: str) -> str:
    """A parameter name as it appears in expressions."""
    return name.replace("-", "_")


def compile_expr(text: str) -> ast.Expression:
    """Parse and check an expression; raises ExprError with what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError("must be a non-empty expression string")
    if len(text) > 500:
        raise ExprError("is longer than 500 characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"is not a valid expression ({exc.msg})") from None
    for node in ast.walk(tree):
        if not isinstance(
            node,
            (
                ast.Expression,
                ast.BoolOp,
                ast.And,
                ast.Or,
                ast.UnaryOp,
                ast.Not,
                ast.USub,
                ast.UAdd,
                ast.BinOp,
                ast.Compare,
                ast.Name,
                ast.Load,
                ast.Constant,
                ast.Tuple,
                ast.List,
                *_BIN,
                *_CMP,
            ),
        ):
            raise ExprError(
                f"uses {type(node).__name__}, which is not allowed (only names, numbers, strings, "
                "arithmetic, comparisons, and/or/not)"
            )
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool, type(None))):
            raise ExprError("uses a constant that is not a number, string or boolean")
    return tree


def names(tree: ast.Expression) -> set[str]:
    return {ALIASES.get(n.id, n.id) for n in ast.walk(tree) if isinstance(n, ast.Name)}


def evaluate(tree: ast.Expression, values: Mapping[str, Any]) -> Any:
    """Evaluate with ``values`` keyed by identifier (underscored names). Unknown names raise ExprError."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            key = ALIASES.get(node.id, node.id)
            if key not in values:
                raise ExprError(f"unknown name {node.id!r}")
            return values[key]
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(ev(e) for e in node.elts)
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.And):
                return all(ev(v) for v in node.values)
            return any(ev(v) for v in node.values)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            if isinstance(node.op, ast.Not):
                return not v
            return -v if isinstance(node.op, ast.USub) else +v
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 16:
                raise ExprError("exponent too large")
            return _BIN[type(node.op)](left, right)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        raise ExprError(f"cannot evaluate {type(node).__name__}")  # pragma: no cover - compile_expr forbids it

    try:
        return ev(tree)
    except ExprError:
        raise
    except (TypeError, ZeroDivisionError, OverflowError) as exc:
        raise ExprError(str(exc)) from None
