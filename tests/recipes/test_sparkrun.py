"""sparkrun recipe import (issue 39): the `vllm serve` vector a recipe runs — its command
rendered as sparkrun 0.4 renders it, or built from its defaults as sparkrun builds it — read
option by option onto the recipe, and every other key understood, kept or noted.

The fixtures are the project's own, one per class of key and value that real community
recipes use (sparkrun registries, eugr's run-recipe format); none is copied from them. What
real vLLM makes of the vectors is checked by its own parser at the end of this file.
"""

from __future__ import annotations

import json

import pytest
import yaml

from sparkdomain.sparkrun import (
    SparkrunImportError,
    SparkrunRecipe,
    looks_like_sparkrun,
    parse_sparkrun,
    structured_argv,
)
from sparkdomain.sparkrun.placeholders import render
from sparkdomain.sparkrun.vector import split_command

SPEC = '{"method":"mtp","num_speculative_tokens":2}'

# A registry-style recipe: a command template, flags written straight in, JSON defaults,
# descriptive metadata, keys of sparkrun's own features and the community's.
REGISTRY_RECIPE = f"""
recipe_version: "2"
name: qwen-moe-mtp
model: Org/Moe-35B-A3B-NVFP4
runtime: vllm
container: vllm/vllm-openai:v0.33.0
maintainer: someone
metadata:
  description: A 35B MoE with MTP speculative decoding
  author: someone
  created: "2026-07-01"
  tags: [moe, nvfp4, mtp]
  source: https://example.org/notes
  runbook: runbooks/moe.md
  model_params: 35B-A3B
  model_dtype: nvfp4
  num_layers: 40
  num_kv_heads: 2
  head_dim: 256
mods: [mods/fix-template]
patches: [patch_mamba.sh]
executor_config:
  privileged: true
  volumes: ["/srv/cache:/cache"]
distribution_config: {{models: {{enabled: true}}}}
defaults:
  port: 8000
  host: 0.0.0.0
  tensor_parallel: 1
  gpu_memory_utilization: 0.825
  max_model_len: auto
  served_model_name: moe
  kv_cache_dtype: fp8_ds_mla
  speculative_config: '{SPEC}'
  load_format: instanttensor
env:
  VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"
  NCCL_IB_DISABLE: "0"
  LD_PRELOAD: /tmp/x.so
  VLLM_PLUGINS: evil
command: |
  vllm serve {{model}} \\
    --served-model-name {{served_model_name}} \\
    --host {{host}} --port {{port}} \\
    --gpu-memory-utilization {{gpu_memory_utilization}} \\
    --max-model-len {{max_model_len}} \\
    --kv-cache-dtype {{kv_cache_dtype}} \\
    --speculative-config '{{speculative_config}}' \\
    --load-format {{load_format}} \\
    --trust-remote-code --enable-auto-tool-choice \\
    --tool-call-parser qwen3_xml --reasoning-parser qwen3 \\
    --attention-backend FLASHINFER \\
    --default-chat-template-kwargs.enable_thinking=false \\
    --chat-template template.jinja \\
    --distributed-executor-backend ray \\
    -tp {{tensor_parallel}}
"""


def parse(text: str, **kwargs: str) -> SparkrunRecipe:
    return parse_sparkrun(yaml.safe_load(text), **kwargs)


def minimal(**extra: object) -> dict[str, object]:
    return {"model": "Qwen/Qwen3-32B", "runtime": "vllm", **extra}


def extra_of(recipe: SparkrunRecipe) -> list[str]:
    return list(recipe.fields.get("extra_args", []))  # type: ignore[arg-type]


# --- the vector: typed fields, every other option vLLM accepts, the panel's own dropped --------


def test_a_registry_recipe_keeps_every_option_its_command_passes() -> None:
    recipe = parse(REGISTRY_RECIPE)

    assert recipe.errors == {}
    fields = recipe.fields
    assert fields["model_id"] == "Org/Moe-35B-A3B-NVFP4"
    assert fields["image"] == "vllm/vllm-openai:v0.33.0"
    assert fields["gpu_memory_utilization"] == "0.825"  # three decimals, as written
    assert fields["max_model_len"] == -1  # auto
    assert fields["kv_cache_dtype"] == "fp8_ds_mla"  # a dtype of vLLM 0.33, not of 0.18
    assert fields["served_model_name"] == "moe"
    assert fields["tool_call_parser"] == "qwen3_xml"
    assert fields["reasoning_parser"] == "qwen3"
    assert fields["tensor_parallel_size"] == 1
    assert (fields["total_params_b"], fields["active_params_b"]) == (35.0, 3.0)  # 35B-A3B
    # --enable-auto-tool-choice is not among them: the tool-call parser field adds it.
    assert extra_of(recipe) == [
        "--speculative-config", SPEC, "--load-format", "instanttensor", "--trust-remote-code",
        "--attention-backend", "FLASHINFER",
        "--default-chat-template-kwargs.enable_thinking=false",
        "--chat-template", "template.jinja",
    ]  # fmt: skip
    # Nothing sparkrun runs is lost silently: the executor is the panel's, and said so.
    assert any("--distributed-executor-backend ray" in n for n in recipe.ignored)
    assert "max_num_seqs" not in fields  # left to vLLM, as the recipe does


def test_provenance_and_metadata_are_kept_whole() -> None:
    source = parse(REGISTRY_RECIPE).fields["source"]
    assert source["format"] == "sparkrun"
    assert source["maintainer"] == "someone"
    assert source["metadata"]["tags"] == ["moe", "nvfp4", "mtp"]
    assert source["metadata"]["source"] == "https://example.org/notes"
    assert source["metadata"]["created"] == "2026-07-01"


def test_mods_patches_and_commands_around_vllm_are_kept_as_the_code_they_are() -> None:
    recipe = parse(REGISTRY_RECIPE)
    assert recipe.fields["mods"] == [
        {"kind": "mod", "name": "mods/fix-template"},
        {"kind": "patch", "name": "patch_mamba.sh"},
    ]
    around = parse_sparkrun(minimal(
        command="pip install extra && cd /w && exec vllm serve {model} --seed 3",
        pre_exec=["mkdir -p /x", {"copy": "a", "dest": "/b"}],
    ))  # fmt: skip
    assert around.errors == {}
    kinds = [(m["kind"], m.get("text")) for m in around.fields["mods"]]
    assert ("pre_exec", "mkdir -p /x") in kinds
    assert ("command", "pip install extra") in kinds and ("command", "cd /w") in kinds
    assert extra_of(around) == ["--seed", "3"]


def test_volumes_and_executor_config_never_become_mounts_and_the_rest_imports() -> None:
    recipe = parse(REGISTRY_RECIPE)
    assert any(n.startswith("volumes (/srv/cache:/cache): never mounted") for n in recipe.ignored)
    assert any(n.startswith("executor_config (privileged)") for n in recipe.ignored)
    assert "volumes" not in recipe.fields and "privileged" not in json.dumps(recipe.fields)


def test_env_keeps_what_tunes_vllm_and_says_why_it_refuses_the_rest() -> None:
    recipe = parse(REGISTRY_RECIPE)
    assert recipe.fields["env"] == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "NCCL_IB_DISABLE": "0"}
    notes = " ".join(recipe.ignored)
    assert "LD_PRELOAD does not tune vLLM" in notes
    assert "VLLM_PLUGINS loads a plugin" in notes


def test_unknown_keys_are_noted_never_fatal() -> None:
    recipe = parse_sparkrun(minimal(someday_key={"a": 1}, metadata={"hardware": "2x Spark"}))
    assert recipe.errors == {}
    assert any(n.startswith("someday_key: a key sparkrun does not know") for n in recipe.ignored)
    assert recipe.fields["source"]["unknown_keys"] == ["someday_key"]
    assert recipe.fields["source"]["metadata"] == {"hardware": "2x Spark"}


def test_the_panels_own_options_are_dropped_and_the_denylist_refused_with_its_reason() -> None:
    recipe = parse_sparkrun(minimal(command=(
        "vllm serve {model} --host 0.0.0.0 --port 9 --cpu-offload-gb 8 "
        "--worker-extension-cls pkg.Ext --chat-template /etc/passwd --api-key s3cret"
    )))  # fmt: skip
    messages = recipe.errors["command"]
    assert any(m.startswith("--cpu-offload-gb sizes memory outside") for m in messages)
    assert any(m.startswith("--worker-extension-cls loads code") for m in messages)
    assert any(m.startswith("--chat-template runs a Jinja template") for m in messages)
    assert any(m.startswith("--api-key would put a secret") for m in messages)
    assert not any("--host" in m or "--port" in m for m in messages)


def test_an_option_no_vllm_has_is_refused_in_vllms_words() -> None:
    recipe = parse_sparkrun(minimal(command="vllm serve {model} --mxfp4-backend CUTLASS"))
    (message,) = recipe.errors["command"]
    assert message.startswith("vllm: error: unrecognized arguments: --mxfp4-backend")


def test_a_removed_flag_is_noted_not_carried() -> None:
    recipe = parse_sparkrun(minimal(command="vllm serve {model} --swap-space 0 --seed 1"))
    assert recipe.errors == {}
    assert any("--swap-space" in n and "removed in vLLM 0.18" in n for n in recipe.ignored)
    assert extra_of(recipe) == ["--seed", "1"]


@pytest.mark.parametrize(
    "parallel, message",
    [
        ({"tensor_parallel": 4}, "--tensor-parallel-size 4 needs 4 GPUs (4 Sparks)"),
        ({"tensor_parallel": 2, "pipeline_parallel": 2}, "needs 4 GPUs (4 Sparks)"),
        ({"data_parallel": 2}, "--data-parallel-size 2 runs two copies"),
    ],
)
def test_a_recipe_for_more_sparks_is_refused_for_that_reason(parallel, message) -> None:
    recipe = parse_sparkrun(minimal(defaults=parallel))
    (refusal,) = recipe.errors["parallelism"]
    assert message in refusal


def test_pipeline_parallel_is_a_field_and_a_pair_takes_it() -> None:
    recipe = parse_sparkrun(minimal(defaults={"pipeline_parallel": 2}))
    assert recipe.errors == {}
    assert recipe.fields["pipeline_parallel_size"] == 2
    ones = parse_sparkrun(minimal(command="vllm serve {model} --data-parallel-size 1"))
    assert ones.errors == {} and "data_parallel_size" not in ones.fields


def test_a_snapshot_path_serves_the_model_at_that_commit() -> None:
    commit = "60d8d70770c6776ff598c94bb586a859a38244f1"
    recipe = parse_sparkrun(minimal(
        model="org/big",
        command=f"vllm serve /cache/huggingface/hub/models--org--big/snapshots/{commit} "
                "--served-model-name {model}",
    ))  # fmt: skip
    assert recipe.errors == {}
    assert recipe.fields["revision"] == commit
    assert recipe.fields["model_id"] == "org/big"
    assert recipe.fields["served_model_name"] == "org/big"


def test_every_served_model_name_is_kept_in_order() -> None:
    recipe = parse_sparkrun(minimal(
        model="org/big", command="vllm serve {model} --served-model-name Big org/big",
    ))  # fmt: skip
    assert recipe.errors == {}
    assert recipe.fields["served_model_name"] == "Big org/big"
    assert not any("served" in note for note in recipe.ignored)


def test_a_draft_read_from_a_mounted_folder_is_kept_as_a_folder_the_host_must_give() -> None:
    recipe = parse_sparkrun(minimal(
        draft_model="org/draft-dflash",
        volumes=["~/models/draft:/drafter:ro", "~/.cache/huggingface:/root/.cache/huggingface",
                 "/srv/unused:/unused"],
        defaults={"speculative_config": '{"model":"/drafter","method":"dflash"}'},
        command="vllm serve {model} --speculative-config '{speculative_config}'",
    ))  # fmt: skip
    assert recipe.errors == {}
    assert extra_of(recipe) == ["--speculative-config", '{"model":"/drafter","method":"dflash"}']
    # Only the folders the command reads; the volumes themselves are never mounted.
    assert recipe.fields["folders"] == [{"path": "/drafter", "source": "~/models/draft"}]
    note = next(n for n in recipe.ignored if n.startswith("folders /drafter"))
    assert "never mounts a recipe's volumes" in note and "org/draft-dflash" in note


# --- rendering as sparkrun renders --------------------------------------------------------------


def test_placeholders_render_as_sparkrun_renders_them() -> None:
    assert render("a {x} {b} {missing} {none}", {"x": 1, "b": True, "none": None}) == (
        "a 1 True {missing} {none}"
    )
    # eugr's run-recipe format doubles the braces of JSON (Python str.format).
    assert render("--c '{{\"k\":{n}}}'", {"n": 2}) == "--c '{\"k\":2}'"
    # Without `{{` every brace but a placeholder is literal.
    assert render("--c '{\"k\":{n}}'", {"n": 2}) == "--c '{\"k\":2}'"


def test_a_placeholder_without_a_value_is_refused_with_its_name() -> None:
    recipe = parse_sparkrun(minimal(command="vllm serve {model} --seed {seed}"))
    assert recipe.errors == {"command": [
        "placeholders without a value in defaults: {seed} (sparkrun would pass them to vLLM as "
        "they are)"
    ]}  # fmt: skip


def test_without_a_command_the_vector_is_sparkruns_structured_one() -> None:
    defaults = {
        "port": 8000, "tensor_parallel": 2, "gpu_memory_utilization": 0.85,
        "max_model_len": 32768, "trust_remote_code": True, "enable_prefix_caching": False,
        "async_scheduling": False, "speculative_config": {"method": "mtp", "num_speculative_tokens": 2},
        "made_up_key": 1,
    }  # fmt: skip
    assert structured_argv("org/m", "", defaults) == [
        "vllm", "serve", "org/m", "-tp", "2", "--port", "8000",
        "--gpu-memory-utilization", "0.85", "--max-model-len", "32768",
        "--no-enable-prefix-caching", "--trust-remote-code", "--speculative-config", SPEC,
        "--no-async-scheduling",
    ]  # fmt: skip
    recipe = parse_sparkrun(minimal(defaults=defaults))
    assert recipe.errors == {}
    assert recipe.fields["enable_prefix_caching"] is False
    assert extra_of(recipe) == ["--trust-remote-code", "--speculative-config", SPEC,
                                "--no-async-scheduling"]  # fmt: skip
    assert any("made_up_key" in n and "not in its flag map" in n for n in recipe.ignored)


def test_a_recipe_without_utilization_gets_sparkruns_gb10_default_and_says_so() -> None:
    recipe = parse_sparkrun(minimal(command="vllm serve {model}"))
    assert recipe.fields["gpu_memory_utilization"] == "0.8"
    assert any("vLLM would take its 0.92" in n for n in recipe.ignored)
    structured = parse_sparkrun(minimal())
    assert structured.fields["gpu_memory_utilization"] == "0.8"


def test_split_command_finds_vllm_after_environment_and_exec() -> None:
    serve, others = split_command("A=1 B=2 exec /usr/bin/vllm serve m --x 1; echo done")
    assert serve == ["vllm", "serve", "m", "--x", "1"]
    assert others == ["echo done"]


# --- overrides and variants ---------------------------------------------------------------------


def test_overrides_apply_as_on_a_spark() -> None:
    recipe = parse_sparkrun(minimal(
        defaults={"max_num_seqs": 8, "tensor_parallel": 1},
        overrides=[
            {"when": {"nodes": 1}, "defaults": {"max_num_seqs": 2}},
            {"when": {"arch": "sm_120"}, "defaults": {"max_num_seqs": 64}},
            {"when": {"accelerator": "gb10", "memory_gb": {"gte": 100}}, "env": {"VLLM_X": "1"}},
            {"when": {"unheard_of": 1}, "defaults": {"max_num_seqs": 99}},
        ],
    ))  # fmt: skip
    assert recipe.errors == {}
    assert recipe.fields["max_num_seqs"] == 2
    assert recipe.fields["env"] == {"VLLM_X": "1"}
    assert any(
        "overrides[3]: not applied on a Spark (unknown selector" in n for n in recipe.ignored
    )


def test_each_variant_is_a_recipe_of_its_own() -> None:
    recipe = parse_sparkrun(minimal(
        name="base",
        defaults={"gpu_memory_utilization": 0.65, "max_num_seqs": 4},
        command="vllm serve {model} --gpu-memory-utilization {gpu_memory_utilization} "
                "--max-num-seqs {max_num_seqs}",
        variants={
            "busy": {"description": "more lanes", "max_num_seqs": 16, "container": "img:2",
                     "env": {"VLLM_Y": "1"}, "patches": ["p2.sh"]},
            "greedy": {"gpu_memory_utilization": 0.95},
        },
    ))  # fmt: skip
    assert recipe.fields["max_num_seqs"] == 4
    (busy_name, busy), (_, greedy) = recipe.variants
    assert (busy_name, busy.fields["name"]) == ("busy", "base (busy)")
    assert busy.fields["max_num_seqs"] == 16 and busy.fields["image"] == "img:2"
    assert busy.fields["env"] == {"VLLM_Y": "1"}
    assert busy.fields["mods"] == [{"kind": "patch", "name": "p2.sh"}]
    assert busy.description == "more lanes"
    # The 0.90 rule is the form's: the variant carries its value there, as the base would.
    assert greedy.fields["gpu_memory_utilization"] == "0.95"


# --- eugr's run-recipe format ------------------------------------------------------------------

EUGR_RECIPE = """
recipe_version: "1"
name: big-model
description: eugr-style recipe
container: vllm-node
mods:
  - mods/fix-something
defaults:
  port: 8000
  host: 0.0.0.0
  tensor_parallel: 2
  gpu_memory_utilization: 0.7
  max_model_len: 131072
  num_speculative_tokens: 3
env:
command: |
  vllm serve org/big-model \\
    --host {host} --port {port} \\
    --speculative-config '{{"method":"mtp","num_speculative_tokens":{num_speculative_tokens}}}' \\
    --gpu-memory-utilization {gpu_memory_utilization} \\
    --max-model-len {max_model_len} \\
    --distributed-executor-backend ray \\
    -tp {tensor_parallel}
"""


def test_eugrs_format_imports_the_same_way() -> None:
    doc = yaml.safe_load(EUGR_RECIPE)
    assert looks_like_sparkrun(doc)
    recipe = parse_sparkrun(doc)
    assert recipe.errors == {}
    assert recipe.fields["model_id"] == "org/big-model"  # named only in the command
    assert recipe.fields["tensor_parallel_size"] == 2
    assert recipe.fields["source"]["format"] == "eugr"
    assert recipe.fields["mods"] == [{"kind": "mod", "name": "mods/fix-something"}]
    assert extra_of(recipe) == [
        "--speculative-config",
        '{"method":"mtp","num_speculative_tokens":3}',
    ]


# --- documents that are not vLLM recipes --------------------------------------------------------


def test_other_engines_are_refused() -> None:
    with pytest.raises(SparkrunImportError, match="'sglang' runtime"):
        parse_sparkrun(minimal(runtime="sglang"))
    with pytest.raises(SparkrunImportError, match="starts sglang"):
        parse_sparkrun({"model": "a/b", "command": "sglang serve --model a/b"})
    with pytest.raises(SparkrunImportError, match="no 'model'"):
        parse_sparkrun({"runtime": "vllm", "container": "x"})


def test_an_include_needs_its_registry() -> None:
    recipe = parse_sparkrun(minimal(include="base-recipe"))
    assert "include" in recipe.errors


def test_looks_like_sparkrun() -> None:
    assert looks_like_sparkrun({"model": "a/b", "container": "img"})
    assert looks_like_sparkrun({"model": "a/b", "runtime": "vllm"})
    assert not looks_like_sparkrun({"model": "a/b"})
    assert not looks_like_sparkrun({"model": "a/b", "defaults": {}, "recipes": []})
    assert not looks_like_sparkrun({"model": "a/b", "container": "img", "sparkpanel": 1})
    assert not looks_like_sparkrun([{"model": "a/b", "container": "img"}])
    assert not looks_like_sparkrun({"model": 3, "container": "img"})


def test_name_comes_from_the_recipe_then_the_hint_then_the_model_id() -> None:
    assert parse_sparkrun(minimal(), name_hint="my-recipe").fields["name"] == "my-recipe"
    assert parse_sparkrun(minimal()).fields["name"] == "Qwen3-32B"
    assert parse_sparkrun(minimal(name="explicit"), name_hint="hint").fields["name"] == "explicit"


def test_metadata_the_planner_cannot_read_is_noted_not_refused() -> None:
    recipe = parse_sparkrun(minimal(metadata={"kv_dtype": "nvfp4", "model_params": "lots"}))
    assert recipe.errors == {}
    assert sum("not used by the planner" in n for n in recipe.ignored) == 2


# --- real vLLM's own parser on the vectors -----------------------------------------------------


def test_real_vllm_reads_the_imported_vector_as_it_reads_sparkruns() -> None:
    """The panel's vector (typed fields + extra arguments, as serve_argv builds it) and the
    vector the recipe's command renders to mean the same to vLLM 0.33's own parser, apart
    from what the panel sets for each run (address, port, executor) and leaves to vLLM."""
    from types import SimpleNamespace

    from sparkdomain.command import serve_argv
    from tests.vllm_adapter.real_parser import real_check

    doc = yaml.safe_load(REGISTRY_RECIPE)
    recipe = parse_sparkrun(doc)
    fields = {"revision": "", "served_model_name": "", "image": "", "max_num_seqs": None,
              "quantization": "", "enable_prefix_caching": None, "enforce_eager": False,
              "max_num_batched_tokens": None, "tensor_parallel_size": 1,
              "pipeline_parallel_size": 1, "reasoning_parser": "", "tool_call_parser": "",
              "extra_args": [], **recipe.fields}  # fmt: skip
    panel = serve_argv(SimpleNamespace(**fields))
    chain = {**doc["defaults"], "model": doc["model"]}
    theirs, _ = split_command(render(doc["command"], chain))
    got = real_check([theirs, panel], namespace=True)
    assert [r["ok"] for r in got] == [True, True], got
    ours, sparkruns = got[1]["ns"], got[0]["ns"]
    # Prefix caching too: a recipe that leaves it to vLLM leaves it to vLLM here as well.
    panel_only = {"host", "port", "distributed_executor_backend"}
    differ = {k for k in set(ours) | set(sparkruns)
              if k not in panel_only and ours.get(k) != sparkruns.get(k)}  # fmt: skip
    assert differ == set(), {k: (sparkruns.get(k), ours.get(k)) for k in differ}


# --- sparkrun's own renderer on the fixtures ------------------------------------------------------


def test_the_vector_read_is_the_one_real_sparkrun_renders(tmp_path) -> None:
    """Each fixture as sparkrun 0.4.2 itself renders it (tools/sparkrun_env.sh): the vector the
    importer reads is sparkrun's, option for option (sparkrun appends --served-model-name)."""
    from tests.recipes.sparkrun_real import sparkrun_commands

    fixtures = {
        "registry": yaml.safe_load(REGISTRY_RECIPE),
        "eugr": yaml.safe_load(EUGR_RECIPE),
        "structured": minimal(container="img", defaults={
            "port": 8000, "tensor_parallel": 2, "gpu_memory_utilization": 0.85,
            "max_model_len": 32768, "trust_remote_code": True, "enable_prefix_caching": False,
            "speculative_config": {"method": "mtp", "num_speculative_tokens": 2},
        }),
    }  # fmt: skip
    paths = {}
    for name, doc in fixtures.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(doc, sort_keys=False))
    rendered = sparkrun_commands(list(paths.values()))
    for name, doc in fixtures.items():
        theirs = rendered[str(paths[name])]
        assert "command" in theirs, theirs
        serve, _ = split_command(theirs["command"])
        ours = _our_vector(doc)
        assert _named(serve) == _named(ours), (name, serve, ours)


def _named(argv: list[str]) -> list[str]:
    """Without a trailing `--served-model-name <the model>`: sparkrun appends it for some
    runtimes, and it is what vLLM (and the panel's gateway) call the model anyway."""
    if argv[-2:] == ["--served-model-name", argv[2]]:
        return argv[:-2]
    return argv


def _our_vector(doc: dict) -> list[str]:
    """The vector the importer reads for a document (what it renders or builds)."""
    from sparkdomain.sparkrun.importer import GB10_DEFAULT_UTILIZATION

    model = doc.get("model") or split_command(render(doc["command"], {}))[0][2]
    chain = {**(doc.get("defaults") or {}), "model": model}
    if "command" in doc:
        serve, _ = split_command(render(doc["command"], chain))
    else:
        chain.setdefault("gpu_memory_utilization", GB10_DEFAULT_UTILIZATION)
        serve = structured_argv(model, doc.get("model_revision", ""), chain)
    if "--served-model-name" not in serve:
        serve += ["--served-model-name", str(chain.get("served_model_name") or model)]
    return serve


def test_the_panels_placement_options_at_vllms_default_are_dropped_not_refused() -> None:
    recipe = parse_sparkrun(minimal(command=(
        "vllm serve {model} --decode-context-parallel-size 1 --data-parallel-size 1"
    )))  # fmt: skip
    assert recipe.errors == {}
    assert sum("is vLLM's default" in n for n in recipe.ignored) == 2
    refused = parse_sparkrun(minimal(command="vllm serve {model} --decode-context-parallel-size 2"))
    assert refused.errors["command"][0].startswith("--decode-context-parallel-size is the panel's")
