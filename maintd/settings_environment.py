"""The ``MAINTD_*`` environment variables: which names are settings, and checks of their values.

pydantic-settings ignores an environment variable that names no setting, so a typo (``MAINTD_HTTP_PORT``
with one underscore, ``MAINTD_SCHEDULR__JITTER_SECONDS``) would silently leave the default in force. Every
``MAINTD_`` variable is therefore checked against the names the settings model defines, and an unknown one
is an error naming it and the closest valid name. A list or mapping given as something other than JSON is
reported naming the variable, instead of pydantic-settings' error about the whole section.

Names that are not settings but are allowed:

- ``MAINTD_CONFIG``: the settings file;
- ``MAINTD_WORKER_PRELOAD`` and ``MAINTD_WORKER_PRELOADED``: read and set by the daemon module of Spark's
  Python workers (:mod:`maintd.pyspark_daemon`); a local session's workers inherit the daemon's environment.
- ``MAINTD_TEST_*`` and ``MAINTD_CI_*``: read by maintd's own test suite and CI, never by maintd;
- Kubernetes service links: for a Service named ``maintd`` Kubernetes gives every pod of the namespace
  ``MAINTD_SERVICE_HOST``, ``MAINTD_SERVICE_PORT``, ``MAINTD_PORT``, ``MAINTD_PORT_9464_TCP``... A name is
  taken for a service link only when the ``<prefix>_SERVICE_HOST`` of the same prefix is set too, so that
  ``MAINTD_HTTP_PORT`` alone is still refused (the Helm chart also turns service links off).
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from maintd.errors import ConfigError

PREFIX = "MAINTD_"
DELIMITER = "__"
CONFIG_VARIABLE = "MAINTD_CONFIG"
#: Variables of the Spark workers' daemon module (:mod:`maintd.pyspark_daemon`), not settings.
WORKER_VARIABLES = ("MAINTD_WORKER_PRELOAD", "MAINTD_WORKER_PRELOADED")
#: Prefixes of variables that belong to maintd's test suite and CI, not to its settings.
RESERVED_PREFIXES = ("MAINTD_TEST_", "MAINTD_CI_")
#: What follows ``<prefix>_`` in the variables of a Kubernetes service link.
_SERVICE_LINK_SUFFIX = re.compile(r"SERVICE_HOST|SERVICE_PORT(?:_.+)?|PORT(?:_\d+_(?:TCP|UDP|SCTP)(?:_[A-Z]+)?)?")


def setting_variables(model: type[BaseModel]) -> tuple[set[str], dict[str, str], set[str]]:
    """The variable names of ``model``'s settings.

    Returns:
        ``(names, structured, open_prefixes)``: every valid name; the names whose value must be JSON (lists,
        mappings, whole sections), to what they hold; and the prefixes below which any name is valid (the
        keys of a mapping setting, e.g. ``MAINTD_SPARK__CONF__...``).
    """
    names: set[str] = set()
    structured: dict[str, str] = {}
    open_prefixes: set[str] = set()
    for name, annotation in _walk(model, PREFIX, top=True):
        names.add(name)
        kind = _structured_kind(annotation)
        if kind is not None:
            structured[name] = kind
        if kind == "a mapping":
            open_prefixes.add(name + DELIMITER)
    return names, structured, open_prefixes


def _walk(model: type[BaseModel], prefix: str, *, top: bool) -> Iterator[tuple[str, Any]]:
    for field_name, info in model.model_fields.items():
        keys = {field_name, info.alias} - {None}
        for key in keys:
            name = f"{prefix}{str(key).upper()}"
            yield name, info.annotation
            nested = _model_of(info.annotation)
            if nested is not None:
                yield from _walk(nested, name + DELIMITER, top=False)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _structured_kind(annotation: Any) -> str | None:
    """``a list``, ``a mapping`` or ``a section`` when the value of such a variable is JSON, else None."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    for option in options:
        if _model_of(option) is not None:
            return "a section"
        origin = typing.get_origin(option) or option
        if origin in (list, tuple, set, frozenset):
            return "a list"
        if origin in (dict, Mapping):
            return "a mapping"
    return None


def check_environment(environ: Mapping[str, str], model: type[BaseModel]) -> None:
    """Refuse unknown ``MAINTD_*`` variables and structured values that are not JSON.

    Raises:
        ConfigError: naming every offending variable and, for unknown names, the closest valid one.
    """
    names, structured, open_prefixes = setting_variables(model)
    present = {name.upper(): name for name in environ if name.upper().startswith(PREFIX)}
    links = _service_links(present)
    problems = []
    for upper, original in sorted(present.items()):
        if upper in (CONFIG_VARIABLE, *WORKER_VARIABLES) or upper.startswith(RESERVED_PREFIXES) or upper in links:
            continue
        if upper not in names and not upper.startswith(tuple(open_prefixes)):
            problems.append(
                f"environment variable {original} is not a maintd setting{_suggestion(upper, names)} "
                "(settings are MAINTD_<SECTION>__<KEY>, with two underscores; see docs/configuration.md)"
            )
        elif upper in structured:
            problem = _json_problem(original, environ[original], structured[upper])
            if problem:
                problems.append(problem)
    if problems:
        raise ConfigError("\n".join(problems))


def _service_links(present: Mapping[str, str]) -> set[str]:
    """The variables Kubernetes sets for Services whose name starts with ``maintd`` (see the module docstring)."""
    hosts = {name.removesuffix("_SERVICE_HOST") for name in present if name.endswith("_SERVICE_HOST")}
    return {
        name
        for name in present
        for host in hosts
        if name.startswith(host + "_") and _SERVICE_LINK_SUFFIX.fullmatch(name.removeprefix(host + "_"))
    }


def _suggestion(name: str, names: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    if not close:
        sections = sorted({n for n in names if DELIMITER not in n.removeprefix(PREFIX)})
        return f"; settings start with one of {', '.join(sections)}"
    return f"; did you mean {close[0]}?"


def _json_problem(name: str, value: str, kind: str) -> str | None:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        return (f"environment variable {name} is not JSON ({exc.msg}): it holds {kind}; "
                f"write e.g. {name}={_example(kind)}")
    expected = list if kind == "a list" else dict
    if not isinstance(parsed, expected):
        return (f"environment variable {name} holds {kind}, not {type(parsed).__name__}; "
                f"write e.g. {name}={_example(kind)}")
    return None


def _example(kind: str) -> str:
    return {"a list": """'["/data/a", "/data/b"]'""", "a mapping": """'{"key": "value"}'"""}.get(
        kind, """'{"key": "value"}'"""
    )


__all__ = ["check_environment", "setting_variables"]
