"""Recipe pages, permissions, extra-argument safety, YAML and config.json import."""

import json
from decimal import Decimal

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from apps.recipes.forms import RecipeForm
from apps.recipes.models import Recipe
from apps.recipes.yaml_io import recipe_to_dict, recipes_from_yaml, recipes_to_yaml
from sparkdomain.command import docker_run_argv, serve_argv
from sparkdomain.presets import RECIPES
from tests.recipes.factories import make_recipe, recipe_data

pytestmark = pytest.mark.django_db


# --- presets -------------------------------------------------------------------------------


def test_the_four_spec_presets_exist_after_migrate():
    presets = {r.slug: r for r in Recipe.objects.presets()}
    assert set(presets) == {r["slug"] for r in RECIPES}
    official = presets["nemotron-3-super-official"]
    assert official.model_id == "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
    assert official.image == "vllm/vllm-openai:cu130-nightly"
    assert (official.gpu_memory_utilization, official.max_model_len, official.max_num_seqs) == (
        Decimal("0.85"), 131072, 4,
    )  # fmt: skip
    assert (official.attention_layers, official.kv_heads, official.head_dim) == (8, 2, 128)
    safest = presets["120b-moe-safest"]
    assert serve_argv(safest)[3:] == [
        "--gpu-memory-utilization", "0.80", "--max-model-len", "8192", "--max-num-seqs", "1",
        "--kv-cache-dtype", "fp8", "--enable-prefix-caching", "--reasoning-parser", "nemotron_v3",
        "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
    ]  # fmt: skip


def test_every_preset_plans_to_a_verdict():
    for recipe in Recipe.objects.presets():
        assert recipe.plan().verdict.value in {"fits", "tight"}, recipe.slug


# --- pages and roles -------------------------------------------------------------------------


def test_member_sees_the_list_and_a_recipe_page_with_the_exact_commands(client_as, member):
    recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
    assert client_as(member).get(reverse("recipes")).status_code == 200
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    # one option per line (sparkdomain/command.py::shell_lines)
    assert "vllm serve nvidia/Qwen3.5-35B-A3B-NVFP4 \\\n  --gpu-memory-utilization 0.90" in html
    assert (
        "docker run \\\n  --rm \\\n  --gpus all \\\n  -p 8000:8000 \\\n"
        "  -v $HOME/.cache/huggingface:/root/.cache/huggingface" in html
    )
    assert 'data-verdict="fits"' in html
    assert "Not benchmarked yet" in html  # history, honestly empty
    assert reverse("recipe-edit", args=[recipe.slug]) not in html  # no edit button


def test_a_speculative_recipe_shows_its_ceiling_with_speculation(client_as, member):
    """Issue 41: the plain single-stream ceiling × the mean acceptance length, never above
    (1 + k) × it; a stated acceptance (vLLM's synthetic rejection sampler) is used as given."""
    recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
    plain = recipe.plan().decode_ceiling_tps
    recipe.extra_args = ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2, '
                         '"rejection_sample_method": "synthetic", '
                         '"synthetic_acceptance_length": 2.5}']  # fmt: skip
    recipe.save()
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    assert 'data-testid="spec-ceiling"' in html
    assert f"{plain * 2.5:,.1f}</span> tok/s for 1 user" in html
    assert f"never above {plain * 3:,.1f}" in html and "a default" not in html
    recipe.extra_args = ['--speculative-config={"method": "mtp", "num_speculative_tokens": 2}']
    recipe.save()
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    assert "mean acceptance length 2.41 — a default" in html


@pytest.mark.parametrize(
    "name, method",
    [
        ("recipe-create", "post"),
        ("recipe-import", "post"),
        ("recipe-create", "get"),
        ("recipe-import", "get"),
    ],
)
def test_member_cannot_create_or_import(client_as, member, name, method):
    client = client_as(member)
    response = getattr(client, method)(
        reverse(name), recipe_data(name="Sneaky") if method == "post" else None
    )
    assert response.status_code == 403
    assert not Recipe.objects.filter(name="Sneaky").exists()


def test_member_cannot_edit_or_delete(client_as, member):
    recipe = make_recipe()
    client = client_as(member)
    assert client.get(reverse("recipe-edit", args=[recipe.slug])).status_code == 403
    assert (
        client.post(
            reverse("recipe-edit", args=[recipe.slug]), recipe_data(name="Changed")
        ).status_code
        == 403
    )
    assert client.post(reverse("recipe-delete", args=[recipe.slug])).status_code == 403
    recipe.refresh_from_db()
    assert recipe.name == "Factory recipe"


def test_operator_creates_edits_and_deletes(client_as, operator):
    client = client_as(operator)
    response = client.post(reverse("recipe-create"), recipe_data(name="My Qwen"))
    recipe = Recipe.objects.get(name="My Qwen")
    assert response.status_code == 302 and response["Location"] == recipe.get_absolute_url()
    assert recipe.slug == "my-qwen" and recipe.created_by == operator
    response = client.post(
        reverse("recipe-edit", args=[recipe.slug]),
        recipe_data(name="My Qwen", slug="my-qwen", max_num_seqs="2"),
    )
    assert response.status_code == 302
    recipe.refresh_from_db()
    assert recipe.max_num_seqs == 2
    client.post(reverse("recipe-delete", args=[recipe.slug]))
    assert not Recipe.objects.filter(pk=recipe.pk).exists()


def test_plan_preview_is_a_partial_with_the_verdict(client_as, member):
    response = client_as(member).post(
        reverse("recipe-plan"),
        recipe_data(max_model_len="262144", max_num_seqs="10", kv_cache_dtype="auto"),
    )
    html = response.content.decode()
    assert 'data-verdict="does not fit"' in html
    assert "<html" not in html


# --- extra arguments: nothing that adds mounts, devices or privileges -------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        ("--privileged", "is not an option of any vLLM"),
        ("--device /dev/mem", "is not an option of any vLLM"),
        ("--download-dir /etc", "reads or writes files outside the model directories"),
        ("--worker-extension-cls evil.Mod", "loads code from outside the image"),
        ("--cpu-offload-gb 64", "sizes memory outside --gpu-memory-utilization"),
        ("--compilation-config.backend evil.mod:fn", "reads as a Python name to import"),
        ("--host 0.0.0.0", "set by the panel"),
        ("--gpu-memory-utilization 0.95", "GPU memory utilization field"),
        ("--load-format --privileged", "--load-format needs a value"),
        ("--load-format nonsense", "not one of"),
        ("--seed lots", "invalid int value: 'lots'"),
        ("--tokenizer 'org/t; rm -rf /'", "may only contain"),
        ("--revision main", "the revision field"),
        ("--trust-remote-code --trust-remote-code", "given twice"),
        ("plain words", "is a value without its option"),
        ("--load-format 'unterminated", "could not read"),
    ],
)
def test_extra_arguments_outside_the_allowlist_are_refused(extra, message):
    form = RecipeForm(data=recipe_data(extra_args=extra))
    assert not form.is_valid()
    assert message in " ".join(form.errors["extra_args"])


def test_allowed_extra_arguments_reach_the_command_as_separate_elements(client_as, operator):
    client_as(operator).post(
        reverse("recipe-create"),
        recipe_data(
            name="Extra", extra_args="--load-format fastsafetensors\n--trust-remote-code  # needed"
        ),
    )
    recipe = Recipe.objects.get(name="Extra")
    assert recipe.extra_args == ["--load-format", "fastsafetensors", "--trust-remote-code"]
    assert serve_argv(recipe)[-3:] == ["--load-format", "fastsafetensors", "--trust-remote-code"]


def test_model_ids_and_images_cannot_smuggle_options():
    form = RecipeForm(data=recipe_data(model_id="--privileged", image="ubuntu --privileged"))
    assert not form.is_valid()
    assert {"model_id", "image"} <= set(form.errors)


def test_docker_command_mounts_only_the_hf_cache():
    argv = docker_run_argv(make_recipe())
    assert argv.count("-v") == 1
    assert "--privileged" not in argv and "--network" not in argv and "--ipc" not in argv


# --- YAML -----------------------------------------------------------------------------------------


def test_yaml_round_trips_every_field():
    make_recipe(
        name="Everything", description="all fields", served_model_name="qwen",
        enforce_eager=True, enable_prefix_caching=False, max_num_batched_tokens=4096, tensor_parallel_size=1,
        reasoning_parser="qwen3", tool_call_parser="hermes", extra_args=["--load-format", "fastsafetensors"],
        active_params_b=3.0, weight_gb=20.5, attention_layers=16, sliding_window_layers=4, sliding_window=512,
        recurrent_state_mib=61.4, checkpoint_kv_dtype="fp8", quantization="fp8", kv_lora_rank=None,
    )  # fmt: skip
    # What issue 39 added: any option as data, three decimals, auto, blank seqs, pipeline
    # parallel, every KV dtype, the environment, the mods and the provenance.
    make_recipe(
        name="Community", gpu_memory_utilization=Decimal("0.825"), max_model_len=-1,
        max_num_seqs=None, kv_cache_dtype="fp8_ds_mla", pipeline_parallel_size=2,
        extra_args=["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
                    "--default-chat-template-kwargs.enable_thinking=false"],
        env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, mods=[{"kind": "mod", "name": "mods/x"}],
        source={"format": "sparkrun", "metadata": {"tags": ["a", "b"]}},
        max_position_embeddings=262144,
    )  # fmt: skip
    before = {r.slug: recipe_to_dict(r) for r in Recipe.objects.all()}
    text = recipes_to_yaml(Recipe.objects.all())
    Recipe.objects.all().delete()
    result = recipes_from_yaml(text)
    assert result.ok, result.problems
    after = {r.slug: recipe_to_dict(r) for r in Recipe.objects.all()}
    assert after == before
    assert after["everything"]["extra_args"] == ["--load-format", "fastsafetensors"]
    community = Recipe.objects.get(slug="community")
    assert (community.gpu_memory_utilization, community.max_model_len) == (Decimal("0.825"), -1)
    assert community.max_num_seqs is None and community.pipeline_parallel_size == 2
    assert community.mods == [{"kind": "mod", "name": "mods/x"}]
    assert community.source["metadata"]["tags"] == ["a", "b"]


def test_malformed_yaml_says_where():
    result = recipes_from_yaml("recipes:\n  - name: [unclosed\n")
    assert not result.ok
    assert "not valid YAML at line" in str(result.problems[0].errors)


def test_unknown_keys_and_existing_slugs_are_errors_and_replace_overwrites():
    make_recipe(name="Existing", slug="existing")
    text = yaml.safe_dump([{"name": "Existing", "slug": "existing", "model_id": "a/b",
                            "gpu_memory_utilization": 0.8, "max_model_len": 2048, "colour": "red"}])  # fmt: skip
    result = recipes_from_yaml(text)
    assert "unknown key(s): colour" in str(result.problems)
    doc = yaml.safe_load(text)
    del doc[0]["colour"]
    result = recipes_from_yaml(yaml.safe_dump(doc))
    assert "already exists" in str(result.problems)
    result = recipes_from_yaml(yaml.safe_dump(doc), replace=True)
    assert result.ok and [r.slug for r in result.updated] == ["existing"]
    assert Recipe.objects.get(slug="existing").max_model_len == 2048


def test_export_view_downloads_yaml_for_one_recipe(client_as, member):
    recipe = make_recipe(name="Download me")
    response = client_as(member).get(reverse("recipe-export") + f"?slug={recipe.slug}")
    assert response["Content-Disposition"] == 'attachment; filename="download-me.yaml"'
    assert yaml.safe_load(response.content)["recipes"][0]["name"] == "Download me"
    assert client_as(member).get(reverse("recipe-export") + "?slug=nope").status_code == 404


def test_import_view_reports_every_problem_and_keeps_nothing(client_as, operator):
    text = yaml.safe_dump({"sparkpanel": 1, "recipes": [
        {"name": "A", "model_id": "a/b", "gpu_memory_utilization": 0.8, "max_model_len": 0},
        {"name": "B", "model_id": "not a model id", "gpu_memory_utilization": 0.8, "max_model_len": 10},
    ]})  # fmt: skip
    response = client_as(operator).post(reverse("recipe-import"), {"text": text})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Nothing was imported" in html and "recipe 1 (A)" in html and "recipe 2 (B)" in html
    assert not Recipe.objects.filter(name__in=["A", "B"]).exists()


def test_import_view_takes_a_sparkrun_file_upload(client_as, operator):
    sparkrun = """
model: nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4
runtime: vllm
container: vllm/vllm-openai:cu130-nightly
defaults:
  port: 8000
  tensor_parallel: 1
  gpu_memory_utilization: 0.85
  max_model_len: 65536
  max_num_seqs: 2
  kv_cache_dtype: fp8
metadata:
  model_params: 120B
  active_params: 12B
  model_dtype: nvfp4
  num_layers: 88
  attention_layers: 8
  num_kv_heads: 2
  head_dim: 128
"""
    upload = SimpleUploadedFile("nemotron.yaml", sparkrun.encode(), content_type="application/yaml")
    response = client_as(operator).post(reverse("recipe-import"), {"file": upload})
    assert response.status_code == 302, response.content.decode()[:2000]
    recipe = Recipe.objects.get(
        model_id="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", max_model_len=65536
    )
    assert (recipe.max_num_seqs, recipe.kv_cache_dtype, recipe.attention_layers) == (2, "fp8", 8)
    assert recipe.total_params_b == 120.0 and recipe.weight_format == "nvfp4"


# --- config.json in the wizard ------------------------------------------------------------


def test_wizard_reads_a_pasted_config_json_into_the_architecture_fields(client_as, member):
    config = {
        "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 80, "num_attention_heads": 64,
        "num_key_value_heads": 8, "hidden_size": 8192, "torch_dtype": "bfloat16",
        "max_position_embeddings": 131072,
    }  # fmt: skip
    data = recipe_data(
        step="1", action="import_config", config_text=json.dumps(config), num_layers="", kv_heads=""
    )
    html = client_as(member).post(reverse("recipe-wizard"), data).content.decode()
    assert 'name="num_layers" value="80"' in html
    assert 'name="kv_heads" value="8"' in html
    assert 'name="head_dim" value="128"' in html
    assert "131,072 tokens" in html


def test_wizard_says_why_a_broken_config_json_cannot_be_read(client_as, member):
    data = recipe_data(step="1", action="import_config", config_text='{"num_hidden_layers": 80,,}')
    html = client_as(member).post(reverse("recipe-wizard"), data).content.decode()
    assert "not valid JSON" in html
    assert 'value="Qwen/Qwen3-32B"' in html  # what was typed is kept


def test_member_walks_the_wizard_without_javascript_but_cannot_save(client_as, member):
    client = client_as(member)
    assert client.get(reverse("recipe-wizard")).status_code == 200
    step2 = client.post(reverse("recipe-wizard"), recipe_data(step="1", action="next"))
    assert 'aria-current="step">2. Workload' in step2.content.decode()
    step3 = client.post(reverse("recipe-wizard"), recipe_data(step="2", action="next"))
    html = step3.content.decode()
    assert "3. Review and save" in html and "Only operators and admins can save" in html
    assert (
        client.post(reverse("recipe-wizard"), recipe_data(step="3", action="save")).status_code
        == 403
    )


def test_wizard_next_stops_on_a_bad_field_of_the_current_step(client_as, member):
    response = client_as(member).post(
        reverse("recipe-wizard"), recipe_data(step="2", action="next", max_num_seqs="0")
    )
    html = response.content.decode()
    assert response.status_code == 400
    assert 'aria-current="step">2. Workload' in html
    assert "greater than or equal to 1" in html


def test_wizard_presets_fill_the_model_and_the_workload(client_as, member):
    client = client_as(member)
    html = client.post(
        reverse("recipe-wizard"), recipe_data(step="1", action="model:llama-3.3-70b-nvfp4")
    ).content.decode()
    assert (
        'value="nvidia/Llama-3.3-70B-Instruct-FP4"' in html
        and 'name="num_layers" value="80"' in html
    )
    html = client.post(
        reverse("recipe-wizard"), recipe_data(step="2", action="workload:70b-team-5")
    ).content.decode()
    assert 'name="max_model_len" value="4096"' in html and 'name="max_num_seqs" value="5"' in html


def test_operator_saves_from_the_wizard(client_as, operator):
    response = client_as(operator).post(
        reverse("recipe-wizard"), recipe_data(name="From wizard", step="3", action="save")
    )
    recipe = Recipe.objects.get(name="From wizard")
    assert response.status_code == 302 and response["Location"] == recipe.get_absolute_url()


def test_wizard_reads_uploaded_config_and_quant_files(client_as, member):
    config = {
        "num_hidden_layers": 88, "hybrid_override_pattern": "M" * 40 + "E" * 40 + "*" * 8,
        "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "hidden_size": 4096,
        "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
        "conv_kernel": 4, "torch_dtype": "bfloat16",
    }  # fmt: skip
    quant = {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}
    data = recipe_data(step="1", action="import_config")
    data["config_file"] = SimpleUploadedFile("config.json", json.dumps(config).encode())
    data["quant_file"] = SimpleUploadedFile("hf_quant_config.json", json.dumps(quant).encode())
    html = client_as(member).post(reverse("recipe-wizard"), data).content.decode()
    assert 'name="attention_layers" value="8"' in html
    assert 'name="kv_heads" value="2"' in html
    assert '<option value="nvfp4" selected>' in html
    assert '<option value="fp8" selected>fp8</option>' in html  # KV dtype of auto
    assert 'name="recurrent_state_mib" value="162.3' in html


def test_a_recipe_with_run_history_is_kept_with_a_message_not_a_500(client_as, operator, sim_host):
    from apps.runs.models import Run, RunState

    recipe = make_recipe(name="Has History")
    Run.objects.create(recipe=recipe, host=sim_host, port=20001, image=recipe.image,
                       state=RunState.STOPPED)  # fmt: skip
    client = client_as(operator)
    response = client.post(reverse("recipe-delete", args=[recipe.slug]), follow=True)
    assert response.status_code == 200
    assert Recipe.objects.filter(pk=recipe.pk).exists()
    assert "is kept: 1 run(s) and 0 benchmark job(s) refer to it" in response.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("revision", ["main; rm -rf /", "../../etc", "-x", "a b", "x" * 201])
def test_a_revision_that_is_no_branch_tag_or_commit_is_refused(revision):
    form = RecipeForm(data=recipe_data(revision=revision))
    assert not form.is_valid() and "revision" in form.errors


@pytest.mark.django_db
def test_a_pinned_revision_reaches_the_command_right_after_the_model():
    form = RecipeForm(data=recipe_data(revision="v1.0"))
    assert form.is_valid(), form.errors
    recipe = form.save()
    assert serve_argv(recipe)[2:5] == ["Qwen/Qwen3-32B", "--revision", "v1.0"]


@pytest.mark.django_db
def test_a_refused_edit_with_a_blank_slug_shows_the_form_again_not_an_error(
    client_as, admin_user, qwen
):
    """Found by the form fuzzer: the page linked back to the form's own instance, whose
    slug the refused values had blanked."""
    data = recipe_data(slug="", image="a\r\n b")
    response = client_as(admin_user).post(reverse("recipe-edit", args=[qwen.slug]), data)
    assert response.status_code == 200
    assert f'href="{qwen.get_absolute_url()}"' in response.content.decode()


@pytest.mark.parametrize(
    ("choice", "stored", "flags"),
    [
        ("unknown", None, []),
        ("true", True, ["--enable-prefix-caching"]),
        ("false", False, ["--no-enable-prefix-caching"]),
    ],
)
def test_prefix_caching_is_vllms_choice_unless_the_recipe_says(choice, stored, flags):
    form = RecipeForm(data=recipe_data(name=f"Prefix {choice}", enable_prefix_caching=choice))
    assert form.is_valid(), form.errors
    recipe = form.save()
    assert recipe.enable_prefix_caching is stored
    argv = serve_argv(recipe)
    assert [a for a in argv if "prefix-caching" in a] == flags
    assert "vLLM&#x27;s default" in str(form["enable_prefix_caching"]) or (
        "vLLM's default" in str(form["enable_prefix_caching"])
    )
    # The panel's own YAML keeps the choice, blank included.
    text = recipes_to_yaml([recipe])
    recipe.delete()
    (again,) = recipes_from_yaml(text).created
    assert again.enable_prefix_caching is stored


def test_wizard_review_shows_what_vllm_will_do_once_the_model_is_known(client_as, member):
    """The wizard's last step shows the same start-up prediction admission goes by: missing
    (and how to get it) until the panel has the model's config.json, then vLLM's figures."""
    from apps.recipes.models import ModelFacts
    from tests.model_configs import QWEN3_SMALL

    client = client_as(member)
    data = recipe_data(step="2", action="next", model_id="Qwen/Qwen3-0.6B", max_model_len="40960")
    html = client.post(reverse("recipe-wizard"), data).content.decode()
    assert "What vLLM will do at start-up" in html and 'data-testid="vllm-start-missing"' in html
    ModelFacts.objects.create(repo_id="Qwen/Qwen3-0.6B", commit="c" * 40, config=QWEN3_SMALL,
                              checkpoint_bytes=int(1.12 * 2**30), source="hub")  # fmt: skip
    html = client.post(reverse("recipe-wizard"), data).content.decode()
    assert 'data-testid="vllm-start-tokens"' in html and "Available KV cache memory" in html


def test_an_mtp_recipe_expects_the_acceptance_measured_for_its_models_own_head(client_as, member):
    """With the model's config.json read (ModelFacts), an MTP recipe's expected acceptance is
    the one public measurements give that model family's head (Nemotron-H: 0.757 / 0.503 /
    0.323 on a GB10), not the generic MTP default; unknown models keep the default."""
    from apps.recipes.models import ModelFacts
    from vllm_adapter.speculative import DEFAULT_ACCEPTANCE, MODEL_MTP_ACCEPTANCE

    recipe = make_recipe(name="Nemotron MTP", model_id="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
                         extra_args=["--speculative-config",
                                     '{"method": "mtp", "num_speculative_tokens": 3}'])  # fmt: skip
    generic = DEFAULT_ACCEPTANCE["mtp"].rates(3)
    assert recipe.speculation.rates == pytest.approx(generic)
    config = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
              "hidden_size": 4096, "num_hidden_layers": 4, "hybrid_override_pattern": "M*EM",
              "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
              "vocab_size": 131072, "num_nextn_predict_layers": 1}  # fmt: skip
    ModelFacts.objects.create(repo_id=recipe.model_id, commit="a" * 40, config=config,
                              checkpoint_bytes=74_625_056_768, source="test")  # fmt: skip
    recipe = Recipe.objects.get(pk=recipe.pk)
    measured = MODEL_MTP_ACCEPTANCE["nemotron_h"].rates(3)
    assert measured != pytest.approx(generic)
    assert recipe.speculation.rates == pytest.approx(measured)
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    assert f"mean acceptance length {1 + sum(measured):.2f}" in html
