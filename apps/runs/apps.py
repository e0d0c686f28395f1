from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # The recipe pages ask for what starts measured (apps/recipes/signals.py).
        from apps.recipes import signals as recipe_signals

        # The run's live elements and the hosts' dashboard lines (models are loaded now).
        from apps.runs import live  # noqa: F401

        recipe_signals.plan_corrections.connect(
            _plan_corrections, dispatch_uid="runs.calibration.plan_corrections"
        )
        recipe_signals.plan_checks.connect(_plan_checks, dispatch_uid="runs.calibration.checks")
        recipe_signals.mod_approvals.connect(_mod_approvals, dispatch_uid="runs.mods.approvals")
        # Retiring a host asks what still runs there (apps/hosts/signals.py).
        from apps.hosts.signals import retire_blockers

        retire_blockers.connect(_retire_blockers, dispatch_uid="runs.retire_blockers")


def _plan_corrections(sender, *, image, arch, flags, recipe=None, **kwargs) -> list:
    from apps.runs.calibration import host_corrections

    return host_corrections(image=image, arch=arch, flags=flags, recipe=recipe)


def _plan_checks(sender, *, recipe, limit, **kwargs) -> list[dict]:
    from apps.runs.calibration import recipe_check_rows

    return recipe_check_rows(recipe, limit)


def _mod_approvals(sender, *, recipe, **kwargs) -> list[dict]:
    from apps.runs.mods import approvals

    return approvals(recipe)


def _retire_blockers(sender, *, host, **kwargs) -> list[str]:
    from apps.runs.models import Run

    runs = Run.objects.active().on(host).select_related("recipe").order_by("pk")
    return [
        f"run {run.pk} (“{run.recipe}”) is {run.get_state_display().lower()} there — stop it "
        f"first ({run.get_absolute_url()})"
        for run in runs
    ]
