from django.urls import path

from apps.benchmarks import views

urlpatterns = [
    path("", views.queue_page, name="benchmarks"),
    path("queue/", views.queue_job_view, name="benchmark-queue"),
    path("suites/", views.suite_list, name="benchmark-suites"),
    path("suites/new/", views.suite_edit, name="benchmark-suite-new"),
    path("suites/<int:pk>/", views.suite_edit, name="benchmark-suite-edit"),
    path("compare/", views.compare, name="benchmark-compare"),
    path("import/", views.import_view, name="benchmark-import"),
    path("jobs/<int:pk>/", views.job_detail, name="benchmark-job"),
    path("jobs/<int:pk>/cancel/", views.job_cancel_view, name="benchmark-cancel"),
    path("jobs/<int:pk>/results.csv", views.job_export, {"fmt": "csv"}, name="benchmark-csv"),
    path("jobs/<int:pk>/results.json", views.job_export, {"fmt": "json"}, name="benchmark-json"),
    # The `vllm bench serve --save-result --save-detailed` format (apps/benchmarks/vllm_bench.py):
    # every level as JSON lines (as --append-result writes them), or one level.
    path(
        "jobs/<int:pk>/vllm-bench.jsonl", views.job_export, {"fmt": "jsonl"}, name="benchmark-vllm"
    ),
    # GuideLLM's report JSON (apps/benchmarks/guidellm_format.py): every level a benchmark.
    path("jobs/<int:pk>/guidellm.json", views.guidellm_export, name="benchmark-guidellm"),
    path(
        "jobs/<int:pk>/levels/<int:result_pk>/vllm-bench.json",
        views.level_export,
        name="benchmark-level-vllm",
    ),
]
