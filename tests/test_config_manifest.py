"""The key manifest (grpo/config/mindspeed_keys.json) and the schema agree, and the manifest is what
tools/mindspeed_manifest.py records from MindSpeed-RL's config classes.

Every MindSpeed-RL key is a field of its section; a first-class field has MindSpeed-RL's type family and
default unless ALLOWED_DIFFERENCES says why not; a long-tail field has the manifest's type and default.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from grpo.config import known_keys
from grpo.config.manifest import COMMIT, MANIFEST_PATH, manifest_keys
from grpo.config.schema import (
    TYPE_CORRECTIONS,
    ActorConfig,
    GenerateConfig,
    MegatronRoleConfig,
    MegatronTrainingConfig,
    ModelConfig,
    RLConfig,
    SamplingConfig,
    Section,
)

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "mindspeed_manifest.py"
# A MindSpeed-RL checkout (a work tree or a bare git directory; https://gitee.com/ascend/MindSpeed-RL), named by
# $MINDSPEED_RL_SOURCE only: no guessed place on this machine.
CHECKOUTS = [os.environ.get("MINDSPEED_RL_SOURCE", "")]

NEEDS_A_VALUE = "MindSpeed-RL has no default (null fails at launch); ours is the GRPO reference's and is always rendered"
# First-class fields whose default differs from MindSpeed-RL's on purpose: (manifest section, key) -> why.
ALLOWED_DIFFERENCES: dict[tuple[str, str], str] = {
    **{("megatron", k): NEEDS_A_VALUE for k in ("global_batch_size", "seq_length", "train_iters", "save_interval",
                                                 "data_path", "tokenizer_type", "split", "micro_batch_size", "lr")},
    ("megatron", "stage"): "MindSpeed-RL's null fails in its GRPO trainer; Ray GRPO needs ray_grpo",
    ("megatron", "lr_warmup_fraction"): "0.0 and MindSpeed-RL's null both mean no warm-up",
    ("megatron", "init_method_std"): "the embedded engine initialises fresh tiny policies with it; 0.01 is what "
                                     "MindSpeed-RL's GRPO recipes set (weights are loaded there)",
    ("rl", "actor_resource"): "num_npus: " + NEEDS_A_VALUE,
}
# (schema section, manifest section) pairs; the role sections take every Megatron key as a long-tail one.
SECTIONS: list[tuple[type[BaseModel], str]] = [
    (ModelConfig, "megatron"), (MegatronTrainingConfig, "megatron"), (ActorConfig, "megatron"),
    (MegatronRoleConfig, "megatron"), (RLConfig, "rl"), (GenerateConfig, "generate"), (SamplingConfig, "sampling"),
]
# Fields of those sections that are grpo-sweep's own spelling of MindSpeed-RL's merge, not MindSpeed-RL keys.
NOT_MINDSPEED = {"model"}


def mindspeed_checkout() -> Path | None:
    """A MindSpeed-RL checkout at the manifest's commit, if one is on this machine."""
    for candidate in filter(None, CHECKOUTS):
        path = Path(candidate)
        if (path / "HEAD").is_file() or (path / "mindspeed_rl").is_dir():
            return path
    return None


def family(annotation: Any) -> str:
    """A type's family: bool, number, str, list, dict, section, any (null dropped from unions)."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = {family(a) for a in get_args(annotation) if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else "|".join(sorted(kinds))
    if origin is Literal:
        return family(type(get_args(annotation)[0]))
    if origin in (list, dict):
        return origin.__name__
    if annotation is bool:
        return "bool"
    if annotation in (int, float):
        return "number"
    if annotation is str:
        return "str"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return "any"


MANIFEST_FAMILY = {"bool": "bool", "int": "number", "float": "number", "str": "str", "list": "list", "dict": "dict",
                   "section": "section", "any": "any"}


def _default(info) -> Any:
    return info.default_factory() if info.default_factory is not None else info.default


def test_manifest_records_its_commit_and_every_class():
    assert len(COMMIT) == 40
    assert {s: len(manifest_keys(s)) > 0 for s in ("megatron", "rl", "generate", "sampling")} == dict.fromkeys(
        ("megatron", "rl", "generate", "sampling"), True)
    assert manifest_keys("megatron")["reuse_fp32_param"] == {"type": "bool", "default": False}
    assert manifest_keys("megatron")["initial_loss_scale"]["default"] == 2**32  # 2 ** 32 in the source
    assert manifest_keys("rl")["n_samples_per_prompt"]["default"] == 1  # config_dict.get(key, 1)
    assert manifest_keys("sampling")["top_k"] == {"type": "int", "default": 50}


@pytest.mark.parametrize("schema, section", SECTIONS, ids=[s.__name__ for s, _ in SECTIONS])
def test_every_manifest_key_is_a_field(schema, section):
    fields = set(schema.model_fields)
    if schema in (MegatronTrainingConfig, ActorConfig):  # the other Megatron sections' first-class keys move in
        fields |= set(ModelConfig.model_fields) | set(MegatronTrainingConfig.model_fields) | set(
            ActorConfig.model_fields)
    assert sorted(set(manifest_keys(section)) - fields) == []  # type: ignore[arg-type]
    assert sorted(set(schema.model_fields) - set(manifest_keys(section)) - NOT_MINDSPEED) == []  # type: ignore[arg-type]


def test_every_manifest_key_is_a_known_key_in_each_section_that_accepts_it():
    keys = set(known_keys())
    for section in ("megatron_training", "actor_config", "ref_config", "reward_config", "model.*"):
        assert {f"{section}.{k}" for k in manifest_keys("megatron")} <= keys, section
    sections = {k.rsplit(".", 1)[0] for k in keys}  # rl_config.actor_resource holds num_npus
    assert {f"rl_config.{k}" for k in manifest_keys("rl")} <= keys | sections
    assert {f"generate_config.{k}" for k in manifest_keys("generate") if k != "sampling_config"} <= keys
    assert {f"generate_config.sampling_config.{k}" for k in manifest_keys("sampling")} <= keys


def _first_class(schema: type[Section]) -> list[str]:
    return [n for n in schema.model_fields if n not in schema.long_tail and n not in NOT_MINDSPEED]


@pytest.mark.parametrize("schema, section", SECTIONS, ids=[s.__name__ for s, _ in SECTIONS])
def test_first_class_fields_have_mindspeeds_type_and_default(schema, section):
    differing = []
    for name in _first_class(schema):
        entry = manifest_keys(section)[name]  # type: ignore[arg-type]
        info = schema.model_fields[name]
        ours, theirs = family(info.annotation), MANIFEST_FAMILY[entry["type"]]
        if name == "actor_resource":
            theirs = "section"  # a dict of num_npus there, a section here
        assert ours == theirs, f"{schema.__name__}.{name}: {ours} vs MindSpeed-RL's {theirs}"
        default, mindspeed = _default(info), entry["default"]
        if (section, name) in ALLOWED_DIFFERENCES or entry["type"] == "section":
            continue
        same = (
            default == mindspeed
            or (default is PydanticUndefined and mindspeed is None)  # required here; null fails there
            or (default is None and info.is_required() is False)  # null: not rendered, MindSpeed-RL's default applies
            or (default is False and mindspeed is None and entry["type"] == "bool")  # a null flag is off there
        )
        if not same:
            differing.append(f"{section}.{name}: ours {default!r}, MindSpeed-RL {mindspeed!r}")
    assert differing == []


def test_allowed_differences_are_real_and_few():
    fields = {(section, n) for schema, section in SECTIONS for n in _first_class(schema)}
    assert set(ALLOWED_DIFFERENCES) <= fields
    assert len(ALLOWED_DIFFERENCES) <= 16


@pytest.mark.parametrize("schema, section", SECTIONS, ids=[s.__name__ for s, _ in SECTIONS])
def test_long_tail_fields_have_the_manifests_type_and_default(schema, section):
    for name in schema.long_tail:
        entry = manifest_keys(section)[name]  # type: ignore[arg-type]
        info = schema.model_fields[name]
        expected = "list|str" if (section, name) in TYPE_CORRECTIONS else MANIFEST_FAMILY[entry["type"]]
        assert family(info.annotation) == expected, name
        assert _default(info) == entry["default"], name
        assert not info.is_required(), name


def _load_tool():
    spec = importlib.util.spec_from_file_location("mindspeed_manifest", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAKE_MEGATRON = '''
TEMPLATES = "/x/templates.json"
class MegatronConfig(BaseConfig):
    """Docstring.

    Attributes:
        kv_channels (int): per-head size.
        spec (str): a spec.
        prompt_type_path (str): a path.
    """
    def __init__(self, training_config, model_config):
        self.use_mcore_models = False
        self.kv_channels = None
        self.spec = None
        self.rotary_base = 10000
        self.initial_loss_scale = 2 ** 32
        self.coc_mode = -1
        self.prompt_type_path = TEMPLATES
        self.dataset_additional_keys = []
        self.update(training_config, model_config)
        self.pad_to_multiple_of = 4
'''
FAKE_RL = '''
class RLConfig(BaseConfig):
    def __init__(self, config_dict):
        self.actor_resource = {"num_npus": None}
        self.max_packing_token_size = 4096
        self.ref_max_packing_token_size = self.max_packing_token_size
        self.n_samples_per_prompt = config_dict.get('n_samples_per_prompt', 1)
        self.update(config_dict)
        self.mini_batch_size = 7
'''
FAKE_GENERATE = '''
class GenerateConfig(BaseConfig):
    """Attributes:
            - seed (int): sampling seed.
    """
    def __init__(self, config_dict):
        self.dtype = "bfloat16"
        self.sampling_config = {"top_k": 50, "temperature": 0.2, "seed": None}
        self.update(config_dict)
'''


def test_tool_reads_defaults_types_and_stops_at_update(tmp_path):
    folder = tmp_path / "mindspeed_rl" / "config_cls"
    folder.mkdir(parents=True)
    for name, text in (("megatron_config", FAKE_MEGATRON), ("rl_config", FAKE_RL), ("generate_config", FAKE_GENERATE)):
        (folder / f"{name}.py").write_text(text)
    data = _load_tool().manifest(tmp_path)
    mega, rl, gen, sampling = (data["sections"][s] for s in ("megatron", "rl", "generate", "sampling"))
    assert mega["kv_channels"] == {"type": "int", "default": None}  # null default: the docstring's type
    assert mega["initial_loss_scale"] == {"type": "int", "default": 2**32} and mega["coc_mode"]["default"] == -1
    assert mega["prompt_type_path"] == {"type": "str", "default": None, "computed": True}
    assert mega["dataset_additional_keys"] == {"type": "list", "default": []}
    assert "pad_to_multiple_of" not in mega  # set after update(): not a default
    assert rl["ref_max_packing_token_size"]["default"] == 4096 and rl["n_samples_per_prompt"]["default"] == 1
    assert "mini_batch_size" not in rl and rl["actor_resource"] == {"type": "dict", "default": {"num_npus": None}}
    assert gen["sampling_config"]["type"] == "section"
    assert sampling == {"top_k": {"type": "int", "default": 50}, "temperature": {"type": "float", "default": 0.2},
                        "seed": {"type": "int", "default": None}}
    assert data["commit"] is None  # not a git checkout


def test_tool_on_the_mindspeed_checkout_reproduces_the_committed_manifest():
    checkout = mindspeed_checkout()
    if checkout is None:
        pytest.skip("no MindSpeed-RL checkout here (set MINDSPEED_RL_SOURCE)")
    done = subprocess.run([sys.executable, str(TOOL), str(checkout)], capture_output=True, text=True, check=True)
    if f'"commit": "{COMMIT}"' not in done.stdout:
        pytest.skip(f"{checkout} is not at the manifest's commit {COMMIT[:7]}: regenerate the manifest to update")
    assert done.stdout == MANIFEST_PATH.read_text()
