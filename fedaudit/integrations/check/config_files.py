"""Read a target's parameters from the configuration file its library defines.

* ``flower-app`` — a Flower app's ``pyproject.toml``: its ``[tool.flwr.app.config]`` table (the run
  config ``flwr run`` passes to the ServerApp and ClientApp). Flower fixes no names for DP
  parameters, so the app's keys are mapped to the target's parameters by ``config_keys``
  (parameter → the app's key, e.g. ``{noise_multiplier = "noise-mult"}``); a parameter without a
  mapping is read from the key of its own name, in snake or kebab case (``noise_multiplier`` or
  ``noise-multiplier``), and ``rounds`` also from Flower's own ``num-server-rounds``.
* ``nvflare-job`` — an NVFlare job's ``config_fed_client.json`` (or ``config_fed_server.json``): the
  ``args`` of the filter whose ``path`` (or ``name``) is ``…SVTPrivacy``, anywhere in the file (its
  ``task_result_filters`` / ``task_data_filters``), read as the parameters of the same names;
  ``config_keys`` maps further ones.

Values given directly (flags, plan keys) take precedence over the file's.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.integrations.check.targets import Target

__all__ = ["read_config", "flower_app_config", "nvflare_svt_args", "FLOWER_ALIASES"]

#: Flower's own names of a parameter (besides its snake and kebab case)
FLOWER_ALIASES: dict[str, tuple[str, ...]] = {"rounds": ("num-server-rounds",)}


def _load(path: str | Path, what: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise FedAuditError(f"config {str(path)!r}: no such file ({what})")
    text = p.read_text(encoding="utf-8")
    try:
        return tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise FedAuditError(f"config {str(path)!r}: not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: "
                            f"{exc}") from None


def flower_app_config(path: str | Path) -> dict[str, Any]:
    """The ``[tool.flwr.app.config]`` table of a Flower app's ``pyproject.toml``."""
    data = _load(path, "a Flower app's pyproject.toml")
    table = data.get("tool", {}).get("flwr", {}).get("app", {}).get("config") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise FedAuditError(f"config {str(path)!r}: no [tool.flwr.app.config] table (a Flower app's pyproject.toml)")
    return table


def nvflare_svt_args(path: str | Path) -> dict[str, Any]:
    """The ``args`` of the one SVTPrivacy filter in an NVFlare job configuration (JSON)."""
    data = _load(path, "an NVFlare job's config_fed_client.json")
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("path") or node.get("name")
            if isinstance(ref, str) and ref.rsplit(".", 1)[-1] == "SVTPrivacy":
                args = node.get("args", {})
                if not isinstance(args, dict):
                    raise FedAuditError(f"config {str(path)!r}: the SVTPrivacy filter's args must be an object")
                found.append(args)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    if not found:
        raise FedAuditError(f"config {str(path)!r}: no SVTPrivacy filter (a component whose path or name ends in "
                            f"'SVTPrivacy')")
    if any(args != found[0] for args in found[1:]):
        raise FedAuditError(f"config {str(path)!r}: {len(found)} SVTPrivacy filters with different args; check "
                            f"each one with its parameters given directly")
    return dict(found[0])


def read_config(target: Target, path: str | Path, config_keys: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The target's parameters found in ``path`` (module docstring), by parameter name."""
    keys = {str(k).strip().lower(): v for k, v in (config_keys or {}).items()}
    unknown = sorted(k for k in keys if k not in target.params)
    if unknown:
        raise FedAuditError(f"config_keys: {unknown[0]!r} is not a parameter of target {target.name!r} "
                            f"(its parameters: {', '.join(target.params)})")
    bad = [k for k, v in keys.items() if not isinstance(v, str) or not v.strip()]
    if bad:
        raise FedAuditError(f"config_keys: {bad[0]!r} must name a key of the configuration file (a string)")
    if target.config_format is None:
        raise FedAuditError(f"target {target.name!r} reads no configuration file; give its parameters directly")
    table = flower_app_config(path) if target.config_format == "flower-app" else nvflare_svt_args(path)
    out: dict[str, Any] = {}
    for name in target.params:
        if name in keys:
            if keys[name] not in table:
                raise FedAuditError(f"config {str(path)!r}: config_keys maps {name!r} to {keys[name]!r}, which the "
                                    f"file does not have (it has: {', '.join(map(str, table)) or 'nothing'})")
            out[name] = table[keys[name]]
            continue
        for candidate in (name, name.replace("_", "-"), *FLOWER_ALIASES.get(name, ())):
            if candidate in table:
                out[name] = table[candidate]
                break
    return out
