"""The base of every section, and the long-tail fields it gains from the key manifest (see the package docstring)."""

from __future__ import annotations

import copy
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, create_model
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from grpo.config.manifest import KeyEntry, ManifestSection, manifest_keys


class Section(BaseModel):
    """Base of every section: unknown keys are errors, values are checked on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)
    # The long-tail fields of this section (from the key manifest); see the module docstring.
    long_tail: ClassVar[frozenset[str]] = frozenset()

    def dump(self, *, render: bool = False) -> dict[str, Any]:
        """Plain dict: every first-class field, long-tail fields only when set, as given.

        ``render=True`` also leaves out first-class fields that are null (not set: MindSpeed-RL's default).
        """
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name in self.long_tail:
                if name in self.model_fields_set:
                    out[name] = to_jsonable_python(value)
                continue
            value = value.dump(render=render) if isinstance(value, Section) else to_jsonable_python(value)
            if not (render and value is None):
                out[name] = value
        return out


_S = TypeVar("_S", bound=Section)
# Where MindSpeed-RL's own files use another type than its docstring names (the manifest's type for a
# null default): its model files give `spec` as a [module, function] list.
TYPE_CORRECTIONS: dict[tuple[str, str], Any] = {("megatron", "spec"): list[str] | str | None}
_FAMILY: dict[str, Any] = {
    "bool": bool | None,
    "int": int | None,
    "float": int | float | None,  # an int stays an int (rendered back as given)
    "str": str | None,
    "list": list[Any] | None,
    "dict": dict[str, Any] | None,
}


def long_tail_annotation(section: ManifestSection, key: str, entry: KeyEntry) -> Any:
    """The type of a long-tail field: the manifest's type family, or null (MindSpeed-RL accepts null)."""
    return TYPE_CORRECTIONS.get((section, key)) or _FAMILY.get(entry.get("type", "any"), Any)


def _long_tail_field(section: ManifestSection, entry: KeyEntry) -> FieldInfo:
    default = entry.get("default")
    text = f"MindSpeed-RL {section} key (long tail)."
    if isinstance(default, list | dict):
        return FieldInfo(default_factory=lambda d=default: copy.deepcopy(d), description=text)
    return FieldInfo(default=default, description=text)


def with_long_tail(base: type[_S], section: ManifestSection, *, skip: frozenset[str] = frozenset()) -> type[_S]:
    """``base`` plus a field for every key of the manifest section it lacks (and not in ``skip``)."""
    keys = {k: e for k, e in manifest_keys(section).items() if k not in base.model_fields and k not in skip}
    fields: dict[str, Any] = {
        key: (long_tail_annotation(section, key, entry), _long_tail_field(section, entry))
        for key, entry in keys.items()
    }
    name = base.__name__.lstrip("_").removesuffix("Base")
    model = create_model(name, __base__=base, __module__=base.__module__, __doc__=base.__doc__, **fields)
    model.__qualname__ = name  # pickled by reference as <the base's module>.<name>, bound there
    model.long_tail = frozenset(keys)
    return model
