"""Fuzzing with hostile sizes: no form, page or import answers 500, whatever it is sent.

Three nets, each found by walking the project rather than from a hand-kept list:

- every form class of the project (`forms.BaseForm` subclasses under `apps.`): every number
  field has an upper bound, and hypothesis feeds each field hostile values for its type
  (5,000-digit integers, 1e308, inf/NaN, 100,000-character text, unknown choices); the form
  answers with field errors, and what it accepts the planner can compute;
- every form every page renders (GET of the URL walk as an admin), posted with hostile
  values to its action and to the htmx endpoints inside it (the live plan preview): never
  a 500;
- the imports (recipe YAML, sparkrun YAML, config.json) through their pages and the API,
  fed generated hostile documents (nested aliases, deep nesting, huge numbers, placeholder
  recursion, non-UTF-8): a 4xx or a page with the problem, in bounded time and size.

Bounded for `make test` (a few examples per form, deadline=None); FUZZ_EXAMPLES scales it.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import time
from html.parser import HTMLParser
from urllib.parse import urljoin

import pytest
from django import forms
from django.core.exceptions import FieldDoesNotExist
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import apps
from apps.core.forms import model_max
from apps.recipes.forms import PlanInputForm, RecipeForm
from sparkdomain import planner
from tests.security.urlwalk import concrete_path, routes

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "6"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
# The page walk (~20 forms): no shrinking, so a failure is reported at once with the
# values that caused it.
PAGE_FUZZ = settings(FUZZ, phases=[Phase.explicit, Phase.reuse, Phase.generate])
SLOW = 10.0  # seconds: a ceiling per request (they take ~50 ms), not a timing
MAX_ANSWER = 2_000_000  # bytes: an error page is never a blow-up of its input

# --- hostile values ---------------------------------------------------------------------
HUGE_NUMBERS = [
    "1" * 5_000, "9" * 20, "-" + "9" * 20, "1e308", "-1e308", "1.7976931348623157e308",
    "1e400", "1e999999999", "inf", "-inf", "Infinity", "nan", "NaN", "0x10", "1_000",
    "١٢٣", "²", " 7 ", "0." + "0" * 5_000 + "1", "4294967296", "2147483648", "-0", "1e-400",
]  # fmt: skip
HUGE_TEXT = [
    "x" * 100_000, "{a}" * 5_000, "\x00", "\ufffd\u202e", "é" * 50_000, "<script>alert(1)</script>", "../" * 1_000, "a\r\nb" * 1_000,
    "[" * 10_000, "&" * 10_000,
]  # fmt: skip
numbers = st.one_of(
    st.sampled_from(HUGE_NUMBERS),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
texts = st.one_of(st.sampled_from(HUGE_TEXT), st.text(max_size=200))
anything = st.one_of(numbers, texts)


# --- hostile documents for the imports ----------------------------------------------------
def _nested_aliases(levels: int) -> str:
    lines = ['a0: &a0 ["xxxxxxxxxxxxxxxx"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append(f"name: *a{levels - 1}")
    return "\n".join(lines) + "\n"


YAML_DOCS = [
    _nested_aliases(9),  # 9^8 strings if expanded: the 351-byte "name" of the probe
    'recipe:\n  name: x\n  model: a/b\ndefaults:\n  a: "{a}{a}{a}{a}"\ncommand: "vllm serve {a}"\n',
    'model: a/b\ndefaults:\n  a: "{b}{b}"\n  b: "{a}{a}"\ncommand: "vllm serve {a}"\n',
    "[" * 100_000,
    "- " * 50_000 + "x",
    "name: x\nmax_model_len: " + "1" * 5_000 + "\n",
    "recipes:\n- name: x\n  model_id: a/b\n  gpu_memory_utilization: 1e308\n  max_model_len: 1e308\n",
    "recipes:\n- name: x\n  model_id: a/b\n  gpu_memory_utilization: .nan\n  max_model_len: .inf\n",
    "recipes:\n- name: x\n  model_id: a/b\n  gpu_memory_utilization: 0.5\n  max_model_len: 100\n"
    "  total_params_b: 1e308\n  num_layers: " + "9" * 400 + "\n",
    "model: a/b\ncontainer: vllm/vllm-openai:latest\ndefaults:\n  max_model_len: " + "9" * 4000
    + "\n  gpu_memory_utilization: 1e308\ncommand: vllm serve {model} --max-model-len"
    " {max_model_len}\n",
    "!!python/object/apply:os.system ['true']\n",
    "x: " + "y" * 900_000 + "\n",
    "ÿþ looks like a byte-order mark",
]  # fmt: skip
NOT_UTF8 = [b"\xff\xfe{\x00}\x00", b"name: caf\xe9\n", b"\x80" * 1_000]
CONFIG_DOCS = [
    "[" * 100_000,
    '{"a":' * 50_000 + "1" + "}" * 50_000,
    '{"num_hidden_layers": ' + "9" * 5_000 + "}",
    '{"num_hidden_layers": 1e308, "num_key_value_heads": 1e308, "head_dim": 1e308,'
    ' "hidden_size": 1e308, "num_attention_heads": 1e308}',
    '{"num_hidden_layers": NaN, "num_key_value_heads": Infinity, "hidden_size": -Infinity}',
    '{"num_hidden_layers": ' + "9" * 18 + ', "num_key_value_heads": ' + "9" * 18
    + ', "head_dim": ' + "9" * 18 + ', "max_position_embeddings": ' + "9" * 18 + "}",
    '{"text_config": ' * 500 + "{}" + "}" * 500,
    '{"architectures": ["' + "A" * 500_000 + '"]}',
    '{"quantization_config": {"quant_method": "' + "q" * 100_000 + '"}}',
]  # fmt: skip
yaml_docs = st.one_of(st.sampled_from(YAML_DOCS), st.text(max_size=300))
config_docs = st.one_of(
    st.sampled_from(CONFIG_DOCS),
    st.recursive(
        st.one_of(st.integers(), st.floats(), st.text(max_size=20), st.none()),
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=20), kids),
        max_leaves=30,
    ).map(lambda v: json.dumps({"num_hidden_layers": v, "text_config": v})),
)


# --- every form class ---------------------------------------------------------------------
def _import_all() -> None:
    for module in pkgutil.walk_packages(apps.__path__, "apps."):
        if ".migrations" not in module.name and ".management" not in module.name:
            importlib.import_module(module.name)


def _form_classes() -> list[type[forms.BaseForm]]:
    _import_all()
    found, todo = {}, [forms.BaseForm]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("apps.") and not cls.__name__.startswith("_"):
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[k] for k in sorted(found)]


FORM_CLASSES = _form_classes()
# Forms whose constructor needs more than data.
FORM_KWARGS = {"CompareForm": lambda: {"job_ids": [1, 2, 3]}, "WebhookForm": lambda: {"user": None},
               "PasswordChangeForm": lambda: {"user": _password_user()}}  # fmt: skip


def _password_user():
    """The password page's form checks the current password of this account."""
    from django.contrib.auth import get_user_model

    user, created = get_user_model().objects.get_or_create(username="fuzz-password")
    if created:
        user.set_password("fuzz-current-passphrase-1")
        user.save(update_fields=["password"])
    return user


NUMBER_FIELDS = (forms.IntegerField,)  # FloatField and DecimalField are IntegerFields


def _form(cls, data=None, files=None):
    kwargs = FORM_KWARGS.get(cls.__name__, dict)()
    return cls(data, files, **kwargs) if data is not None else cls(**kwargs)


def _field_values(field: forms.Field):
    if isinstance(field, forms.BooleanField):
        return st.one_of(st.sampled_from(["on", "", "false"]), anything)
    if isinstance(field, NUMBER_FIELDS):
        return numbers
    if isinstance(field, forms.ModelMultipleChoiceField | forms.MultipleChoiceField):
        return st.lists(st.one_of(numbers, texts), max_size=3)
    if isinstance(field, forms.ChoiceField | forms.ModelChoiceField):
        choices = []
        if isinstance(field, forms.ChoiceField):
            choices = [str(v) for v, _ in field.choices if not isinstance(_, list | tuple)]
        return st.one_of(st.sampled_from(choices or ["1"]), numbers, texts)
    return texts


def test_the_walk_finds_the_forms():
    names = {cls.__name__ for cls in FORM_CLASSES}
    assert {"RecipeForm", "PlanInputForm", "YamlImportForm", "ConfigJsonForm", "NoticeForm",
            "RunStartForm", "SuiteForm", "WebhookForm", "TokenForm"} <= names, names  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("cls", FORM_CLASSES, ids=lambda c: c.__name__)
def test_every_number_field_of_every_form_has_an_upper_bound(cls):
    """On the form field, or (a ModelForm's) on the model field it is saved to, whose
    validators the form runs too."""
    form = _form(cls)
    model = getattr(getattr(cls, "_meta", None), "model", None)

    def bounded(name, field) -> bool:
        if field.max_value is not None or getattr(field, "max_digits", None) is not None:
            return True
        if model is None:
            return False
        try:
            return model_max(model._meta.get_field(name)) is not None
        except FieldDoesNotExist:
            return False

    unbounded = [
        name
        for name, field in form.fields.items()
        if isinstance(field, NUMBER_FIELDS) and not bounded(name, field)
    ]
    assert not unbounded, f"{cls.__name__}: number fields without an upper bound: {unbounded}"


@pytest.mark.django_db
@pytest.mark.parametrize("cls", FORM_CLASSES, ids=lambda c: c.__name__)
def test_hostile_values_are_field_errors_and_what_a_form_accepts_works(cls, qwen, sim_host):
    fields = {n: f for n, f in _form(cls).fields.items() if not isinstance(f, forms.FileField)}
    assert fields or cls.__name__ in ("ConfigJsonForm", "YamlImportForm") or not cls.base_fields

    @FUZZ
    @given(data=st.fixed_dictionaries({name: _field_values(f) for name, f in fields.items()}))
    def check(data):
        form = _form(cls, data)
        if not form.is_valid():
            assert form.errors
            return
        # What a form lets through must be usable by what consumes it.
        if isinstance(form, PlanInputForm):
            planner.plan(*form.to_planner())
        if isinstance(form, RecipeForm):
            form.instance.plan()

    check()


@pytest.mark.django_db
@pytest.mark.parametrize("field", list(PlanInputForm.base_fields))
def test_the_largest_values_the_planner_form_accepts_still_plan(field):
    """Every architecture number at its bound at once: the planner's products stay finite."""
    form = PlanInputForm()
    data = {n: f.initial for n, f in form.fields.items() if f.initial is not None}
    for name, f in form.fields.items():
        if isinstance(f, NUMBER_FIELDS) and f.max_value is not None and name != field:
            data[name] = f.max_value
    data["gpu_memory_utilization"] = "0.9"
    bound = PlanInputForm(data)
    assert bound.is_valid(), bound.errors
    plan = planner.plan(*bound.to_planner())
    assert plan.verdict is not None


# --- every form every page renders, posted with hostile values ----------------------------
class _Forms(HTMLParser):
    """<form method=post> elements: their action, fields (name → type, values) and the
    htmx endpoints inside them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.forms: list[dict] = []
        self._form: dict | None = None
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            if (a.get("method") or "get").lower() == "post" or a.get("hx-post"):
                self._form = {"action": a.get("hx-post") or a.get("action") or "",
                              "multipart": "multipart" in (a.get("enctype") or "")
                              or "multipart" in (a.get("hx-encoding") or ""),
                              "fields": {}, "buttons": [], "hx": []}  # fmt: skip
                self.forms.append(self._form)
            return
        if self._form is None:
            return
        if a.get("hx-post"):
            self._form["hx"].append(a["hx-post"])
        name = a.get("name")
        if tag == "button" and name:
            self._form["buttons"].append((name, a.get("value", "")))
        elif tag == "input" and name:
            kind = (a.get("type") or "text").lower()
            if kind == "submit":
                self._form["buttons"].append((name, a.get("value", "")))
            else:
                entry = self._form["fields"].setdefault(name, {"type": kind, "values": []})
                entry["values"].append(a.get("value", ""))
        elif tag == "textarea" and name:
            self._form["fields"].setdefault(name, {"type": "textarea", "values": [""]})
        elif tag == "select" and name:
            self._select = name
            self._form["fields"].setdefault(name, {"type": "select", "values": []})
        elif tag == "option" and self._select:
            self._form["fields"][self._select]["values"].append(a.get("value", ""))

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = None
        elif tag == "select":
            self._select = None


NEVER_POST = ("/accounts/logout/", "/admin/")


def _page_forms(client, world) -> dict[tuple, dict]:
    """Every distinct post form on every page of the walk (by target and field names)."""
    found: dict[tuple, dict] = {}
    for route in routes():
        if route.is_api:
            continue
        path = concrete_path(route, {**world, "job": world["done_jobs"][0]})
        response = client.get(path)
        if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
            continue
        parser = _Forms()
        parser.feed(response.content.decode())
        for form in parser.forms:
            for target in [form["action"], *form["hx"]]:
                url = urljoin(path, target) if target else path
                if url.startswith(NEVER_POST):
                    continue
                key = (url, tuple(sorted(form["fields"])))
                found.setdefault(key, {**form, "url": url, "page": path})
    return found


def _input_values(kind: str, values: list[str], name: str):
    ordinary = st.sampled_from([v for v in values if v] or [""])
    if kind == "file":
        docs = config_docs if "config" in name or "quant" in name else yaml_docs
        raw = st.one_of(docs.map(str.encode), st.sampled_from(NOT_UTF8))
        return raw.map(lambda d: SimpleUploadedFile(f"{name}.txt", d))
    if kind == "number":
        return st.one_of(ordinary, numbers)
    if kind in ("checkbox", "radio", "select", "hidden"):
        return st.one_of(ordinary, anything)
    if kind == "textarea" and ("config" in name or "quant" in name):
        return st.one_of(ordinary, config_docs, texts)
    if kind == "textarea" and name in ("text", "yaml"):
        return st.one_of(yaml_docs, texts)
    return st.one_of(ordinary, anything)


def _post(client, url: str, data: dict, htmx: bool):
    headers = {"HX-Request": "true"} if htmx else {}
    started = time.monotonic()
    response = client.post(url, data, headers=headers)
    elapsed = time.monotonic() - started
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, elapsed, len(body)


def _fuzz_form(client, form: dict) -> None:
    fields = form["fields"]
    strategy = st.fixed_dictionaries(
        {name: _input_values(f["type"], f["values"], name) for name, f in fields.items()}
    )

    @PAGE_FUZZ
    @given(data=strategy, button=st.sampled_from(form["buttons"] or [None]), htmx=st.booleans())
    def check(data, button, htmx):
        data = dict(data)
        if button:
            data[button[0]] = button[1]
        with transaction.atomic():  # each example starts from the same panel
            response, elapsed, size = _post(client, form["url"], data, htmx)
            transaction.set_rollback(True)
        summary = {k: (str(v)[:40], len(str(v))) for k, v in data.items()}
        assert response.status_code < 500, (form["url"], response.status_code, summary)
        assert elapsed < SLOW, (form["url"], elapsed, summary)
        assert size < MAX_ANSWER, (form["url"], size, summary)

    check()


@pytest.mark.django_db
def test_no_form_on_any_page_answers_500_to_hostile_values(world, admin_user, client_as):
    client = client_as(admin_user, raise_request_exception=False)  # a 500 is an answer
    page_forms = _page_forms(client, world)
    targets = {f["url"] for f in page_forms.values()}
    # The walk reached the forms that matter (not only buttons).
    for url in ("/recipes/new/", "/recipes/plan/", "/recipes/wizard/", "/recipes/import/"):
        assert url in targets, sorted(targets)
    assert len(page_forms) >= 15, sorted(targets)
    failures: list[str] = []

    for key, form in sorted(page_forms.items()):
        try:
            _fuzz_form(client, form)
        except AssertionError as exc:
            failures.append(f"{key[0]} (on {form['page']}): {str(exc)[:400]}")
    assert not failures, "\n".join(failures)


# --- the imports ----------------------------------------------------------------------------
@pytest.mark.django_db
def test_hostile_import_documents_are_refused_in_bounded_time_and_size(
    operator, client_as, api_as, qwen
):
    page = client_as(operator, raise_request_exception=False)
    api = api_as(operator)
    api.client.raise_request_exception = False

    @FUZZ
    @given(doc=yaml_docs, config=config_docs, replace=st.booleans())
    def check(doc, config, replace):
        with transaction.atomic():
            answers = [
                ("YAML page", _post(page, "/recipes/import/", {"text": doc, "replace": replace},
                                    False)),
                ("YAML file", _post(page, "/recipes/import/", {"file": SimpleUploadedFile(
                    "r.yaml", doc.encode())}, False)),
                ("config.json", _post(page, "/recipes/wizard/", {"action": "import_config",
                                      "step": "1", "config_text": config}, True)),
                ("config.json file", _post(page, "/recipes/wizard/", {
                    "action": "import_config", "step": "1",
                    "config_file": SimpleUploadedFile("config.json", config.encode())}, True)),
            ]  # fmt: skip
            started = time.monotonic()
            api_answer = api.post("/recipes/import", {"yaml": doc, "replace": replace})
            body = api_answer.content
            answers.append(("API", (api_answer, time.monotonic() - started, len(body))))
            transaction.set_rollback(True)
        for label, (response, elapsed, size) in answers:
            shown = (label, doc[:60], config[:60])
            assert response.status_code < 500, (*shown, response.status_code)
            assert elapsed < SLOW, (*shown, elapsed)
            assert size < MAX_ANSWER, (*shown, size)
        assert api_answer.status_code in (200, 400, 422), (doc[:60], api_answer.status_code)

    check()


@pytest.mark.django_db
@pytest.mark.parametrize("doc", YAML_DOCS, ids=range(len(YAML_DOCS)))
def test_each_hostile_yaml_document_is_a_4xx_through_the_api(doc, operator, api_as):
    """The sampled documents, each once (hypothesis above mixes them with generated ones)."""
    started = time.monotonic()
    response = api_as(operator).post("/recipes/import", {"yaml": doc})
    assert time.monotonic() - started < SLOW
    assert response.status_code in (400, 422), (response.status_code, response.content[:300])
    assert len(response.content) < MAX_ANSWER


@pytest.mark.django_db
@pytest.mark.parametrize("doc", CONFIG_DOCS, ids=range(len(CONFIG_DOCS)))
def test_each_hostile_config_json_is_an_import_problem_on_the_wizard(doc, operator, client_as):
    page = client_as(operator, raise_request_exception=False)
    data = {"action": "import_config", "step": "1", "config_text": doc}
    response, elapsed, size = _post(page, "/recipes/wizard/", data, True)
    assert response.status_code < 500, response.status_code
    assert elapsed < SLOW and size < MAX_ANSWER, (elapsed, size)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("total_params_b", "1e308", "less than or equal to 10000"),
        ("num_layers", "1" * 5_000, "at most 40 characters"),
        ("kv_heads", "9" * 20, "less than or equal to 1024"),
        ("weight_gb", "inf", "Enter a number"),
        ("recurrent_state_mib", "nan", "Enter a number"),
    ],
)
def test_a_huge_number_in_the_recipe_pages_is_a_field_error(field, value, words, operator,
                                                            client_as):  # fmt: skip
    """The live plan preview and the recipe form (before: 1e308 parameters made the planner
    raise, a 500 on every keystroke of the preview, and the recipe form saved it)."""
    client = client_as(operator, raise_request_exception=False)
    data = {"name": "Huge", "model_id": "a/b", "gpu_memory_utilization": "0.8",
            "max_model_len": "8192", "max_num_seqs": "2", "kv_cache_dtype": "auto",
            "weight_format": "bf16", "tensor_parallel_size": "1", "image": "vllm/vllm-openai:v1",
            "total_params_b": "30", "num_layers": "40", "kv_heads": "8", "head_dim": "128",
            field: value}  # fmt: skip
    preview = client.post("/recipes/plan/", data, headers={"HX-Request": "true"})
    assert preview.status_code < 500
    assert words in preview.content.decode(), preview.content.decode()[:2000]
    saved = client.post("/recipes/new/", data)
    assert saved.status_code in (200, 400), saved.status_code  # the form again, not a redirect
    assert words in saved.content.decode()
