"""Loading plans: a dict as it is, or a JSON or YAML file named by a ``str`` or ``Path``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Union

__all__ = ["PlanLike", "load_plan"]

#: A plan: the document itself, or the path of a ``.json``, ``.yaml`` or ``.yml`` file.
PlanLike = Union[dict, str, "os.PathLike[str]"]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice in one object (Cairn refuses duplicate keys)")
        out[key] = value
    return out


def load_plan(plan: Any) -> dict[str, Any]:
    """The plan document. A dict is returned as it is; a ``str`` or ``Path`` names a file read as YAML when it
    ends in ``.yaml``/``.yml`` (needs PyYAML: ``pip install 'cairn-sdk[yaml]'``) and as JSON otherwise. A key
    repeated in one object is an error, as it is for the server."""
    if isinstance(plan, dict):
        return plan
    if isinstance(plan, (str, os.PathLike)):
        path = Path(plan)
        if not path.is_file():
            raise FileNotFoundError(f"no plan file at {path} (pass a dict for a plan document)")
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() in (".yaml", ".yml"):
            return _yaml(text, path)
        try:
            doc = json.loads(text, object_pairs_hook=_no_duplicates)
        except ValueError as e:
            raise ValueError(f"{path} is not a JSON plan: {e}") from e
        if not isinstance(doc, dict):
            raise ValueError(f"{path} holds a JSON {type(doc).__name__}, not a plan object")
        return doc
    raise TypeError(f"a plan is a dict or the path of a JSON/YAML file, not {type(plan).__name__}")


def _yaml(text: str, path: Path) -> dict[str, Any]:
    try:
        import yaml
    except ImportError:
        raise ImportError(f"reading {path} needs PyYAML: pip install 'cairn-sdk[yaml]'") from None

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
        loader.flatten_mapping(node)
        pairs = [(loader.construct_object(k, deep=deep), loader.construct_object(v, deep=deep))
                 for k, v in node.value]
        return _no_duplicates(pairs)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        doc = yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, ValueError) as e:
        raise ValueError(f"{path} is not a YAML plan: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{path} holds a YAML {type(doc).__name__}, not a plan object")
    return json.loads(json.dumps(doc, default=str))
